"""Outgoing webhooks: Standard Webhooks signatures (the specification's test vector, and a
receiver that checks them on its own), retries, redelivery, and the private-address rule."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.issues.services import issue_update
from apps.notifications import services, webhooks
from apps.notifications.delivery import deliver_due
from apps.notifications.models import Delivery, Webhook
from tests.conftest import new_issue
from tests.fakes.webhook_receiver import FakeReceiver


def test_signature_matches_the_specifications_test_vector():
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    signature = webhooks.sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    headers = {"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330", "webhook-signature": signature}
    assert webhooks.verify(secret, headers, body, now=1614265330)
    assert not webhooks.verify(secret, headers, body + b" ", now=1614265330)
    assert not webhooks.verify(secret, headers, body, now=1614265330 + 301)


@pytest.fixture
def receiver():
    with FakeReceiver() as fake:
        yield fake


def test_deliveries_are_signed_retried_logged_and_redelivered(net, receiver, clock):
    hook, secret = services.webhook_create(actor=net.owner, url=receiver.hook_url, events=["canceled"])
    receiver.secret = secret
    issue = new_issue(net.w.b, "Hooked")
    issue_update(actor=net.owner, identifier=issue.identifier, status="canceled", cancel_reason="no longer needed")
    receiver.fail_next(1, 503)

    assert deliver_due()["failed"] == 1
    clock.advance(seconds=11)
    assert deliver_due()["sent"] == 1

    (event,) = receiver.accepted.values()
    assert event["type"] == "issue.canceled"
    assert event["data"]["identifier"] == issue.identifier and event["data"]["reason"] == "no longer needed"
    assert receiver.rejected == 0
    (d,) = Delivery.objects.filter(webhook=hook)
    assert (d.status, d.attempts) == ("sent", 2)

    services.delivery_retry(actor=net.owner, delivery_id=d.pk)  # redeliver
    assert deliver_due()["sent"] == 1
    ids = [r.header("webhook-id") for r in receiver.seen("POST", "/hook")]
    assert len(ids) == 3 and len(set(ids)) == 1  # one message id: the receiver drops repeats
    assert len(receiver.accepted) == 1


def test_a_receiver_with_another_secret_rejects_the_delivery(net, receiver):
    services.webhook_create(actor=net.owner, url=receiver.hook_url, events=["done", "canceled"])
    receiver.secret = webhooks.new_secret()  # not the one the server signs with
    issue = new_issue(net.w.b, "Forged?")
    issue_update(actor=net.owner, identifier=issue.identifier, status="canceled", cancel_reason="x")
    deliver_due()
    assert receiver.accepted == {} and receiver.rejected == 1
    assert Delivery.objects.get().last_status == 401


def test_events_not_picked_are_not_sent(net, receiver):
    services.webhook_create(actor=net.owner, url=receiver.hook_url, events=["done"])
    issue = new_issue(net.w.b, "Not this one")
    issue_update(actor=net.owner, identifier=issue.identifier, status="canceled", cancel_reason="x")
    deliver_due()
    assert receiver.requests == [] and Delivery.objects.count() == 0


def test_private_and_loopback_urls_are_refused_unless_allowed(net, settings):
    settings.RETASC_WEBHOOK_ALLOW_PRIVATE = False
    for url in (
        "http://127.0.0.1:9/hook",
        "http://10.1.2.3/hook",
        "http://[::1]/x",
        "http://169.254.169.254/latest",
        "ftp://example.com/",
    ):
        with pytest.raises(ServiceError) as refused:
            services.webhook_create(actor=net.owner, url=url, events=["done"])
        assert refused.value.code == "INVALID_ARGUMENT"
    assert Webhook.objects.count() == 0


def test_only_owners_register_webhooks(net, receiver):
    with pytest.raises(ServiceError) as refused:
        services.webhook_create(actor=net.member, url=receiver.hook_url, events=["done"])
    assert refused.value.code == "FORBIDDEN"
    with pytest.raises(ServiceError):
        services.webhook_create(actor=net.w.a, url=receiver.hook_url, events=["done"])  # an agent key, even the owner's
    assert Webhook.objects.count() == 0
