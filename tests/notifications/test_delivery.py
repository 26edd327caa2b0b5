"""Delivery: at least once with an idempotency key, backoff, 429 Retry-After, 24 h to dead,
a retry of a dead letter, a worker killed mid-delivery, a provider that is down."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apps.core.errors import ServiceError
from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.notifications import delivery as worker
from apps.notifications import services
from apps.notifications.models import Delivery
from tests.conftest import new_issue


def one_message(net):
    """The member, bound on Telegram only, is told that their issue is done."""
    net.bind_telegram(net.w.member, 2)
    issue = new_issue(net.w.b, "Deliver me")
    claim = leases.claim_issue(actor=net.w.a, identifier=issue.identifier)
    issue_update(actor=net.w.a, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])
    return issue


def sends(fake):
    return fake.seen("POST", r"/bot[^/]+/sendMessage")


def test_backoff_doubles_and_is_capped():
    assert [worker.backoff(n) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert worker.backoff(30) == 3600


def test_a_429_is_retried_after_retry_after(net, clock):
    tg = net.f.telegram
    one_message(net)
    tg.fail_next(1, 429, {"ok": False, "error_code": 429, "parameters": {"retry_after": 90}}, headers={"Retry-After": "90"})

    assert worker.deliver_due()["failed"] == 1
    (d,) = Delivery.objects.all()
    assert (d.status, d.attempts, d.last_status) == ("pending", 1, 429)
    assert d.next_attempt_at == clock.now + timedelta(seconds=90)  # the provider's wait, longer than the backoff

    clock.advance(seconds=89)
    assert worker.deliver_due()["sent"] == 0 and len(sends(tg)) == 1  # not before Retry-After
    clock.advance(seconds=2)
    assert worker.deliver_due()["sent"] == 1
    assert Delivery.objects.get().status == "sent"
    assert len(tg.delivered) == 1 and len(sends(tg)) == 2


def test_5xx_until_24h_makes_a_dead_letter_then_a_retry_sends_it(net, clock):
    tg = net.f.telegram
    one_message(net)
    tg.fail_next(1000, 502)
    outcomes = []
    for _ in range(40):
        result = worker.deliver_due()
        outcomes.append("dead" if result["dead"] else "failed" if result["failed"] else "-")
        if result["dead"]:
            break
        clock.advance(seconds=Delivery.objects.get().next_attempt_at.timestamp() - clock.now.timestamp())
    (d,) = Delivery.objects.all()
    assert d.status == "dead" and d.last_status == 502
    assert clock.now - d.window_start <= timedelta(hours=24)
    assert d.attempts == outcomes.count("failed") + 1 and d.attempts > 5
    assert tg.delivered == {}

    tg._failures.clear()
    services.delivery_retry(actor=net.owner, delivery_id=d.pk)
    assert worker.deliver_due()["sent"] == 1
    assert Delivery.objects.get().status == "sent"
    (message,) = tg.delivered.values()
    assert message["chat_id"] == "2" and "is done: Deliver me" in message["text"]


def test_a_worker_killed_mid_delivery_sends_once_back_with_the_same_key(net, clock):
    """The worker took the row and the provider got the message, but it died before
    recording it: when the lease ends the message goes again, with the same idempotency key,
    and the provider (which drops repeats by that key) has it once."""
    tg = net.f.telegram
    one_message(net)
    worker.expand_outbox()
    (d,) = Delivery.objects.all()
    assert worker._take(d.pk, clock.now)
    from apps.notifications.delivery import _send

    _send(Delivery.objects.select_related("outbox", "binding", "binding__channel").get(pk=d.pk))  # ... then it died
    assert Delivery.objects.get().status == "sending"

    assert worker.deliver_due()["sent"] == 0  # its lease still runs: nobody else takes it
    clock.advance(seconds=worker.lease().total_seconds() + 1)
    counts = worker.deliver_due()

    assert counts["released"] == 1 and counts["sent"] == 1
    keys = [r.header("idempotency-key") for r in sends(tg)]
    assert len(keys) == 2 and keys[0] == keys[1] == d.idempotency_key
    assert len(tg.delivered) == 1  # seen once


def test_a_provider_that_is_down_loses_nothing(net, clock):
    tg = net.f.telegram
    one_message(net)
    tg.stop()
    assert worker.deliver_due()["failed"] == 1
    assert Delivery.objects.get().last_error.startswith("Telegram could not be reached")
    tg.start()
    clock.advance(seconds=11)
    assert worker.deliver_due()["sent"] == 1
    assert len(tg.delivered) == 1


def test_expansion_twice_writes_each_delivery_once(net):
    one_message(net)
    worker.expand_outbox()
    from apps.notifications.models import Outbox

    Outbox.objects.update(expanded_at=None)  # as if the worker died before marking it
    worker.expand_outbox()
    assert Delivery.objects.count() == 1


def test_send_test_reaches_only_the_callers_own_chat(net):
    net.bind_telegram(net.w.owner, 1)
    net.bind_telegram(net.w.member, 2)
    assert services.channel_send_test(actor=net.owner, channel_id=net.telegram.pk) == 1
    worker.deliver_due()
    assert net.f.telegram.texts_to(1) == ["Test message from Retasc: this channel works."]
    assert net.f.telegram.texts_to(2) == []


def test_secrets_never_reach_the_delivery_log(net):
    tg = net.f.telegram
    one_message(net)
    tg.fail_next(1, 401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
    worker.deliver_due()
    assert tg.token not in Delivery.objects.get().last_error


def test_a_sent_chat_message_is_not_sent_again_by_retry(net):
    one_message(net)
    worker.deliver_due()
    (d,) = Delivery.objects.all()
    with pytest.raises(ServiceError) as refused:
        services.delivery_retry(actor=net.owner, delivery_id=d.pk)
    assert refused.value.code == "NOT_FOUND"
    assert Delivery.objects.get().status == "sent"
    with pytest.raises(ServiceError) as refused:
        services.delivery_retry(actor=net.member, delivery_id=d.pk)
    assert refused.value.code == "FORBIDDEN"
