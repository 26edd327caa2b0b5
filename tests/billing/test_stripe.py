"""Card top-ups (SPEC §11): Checkout sessions created at a fake Stripe on the loopback with
the official client, and signed webhook events delivered to POST /hooks/stripe.

Every refusal also checks that nothing changed: balance, ledger, receipts, applied events.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest
from django.test import Client

from apps.billing.models import LedgerEntry, StripeEvent, TopUp
from apps.billing.services import topup_checkout
from apps.core.errors import ServiceError
from apps.issues.models import Activity
from apps.orgs.models import Org
from apps.orgs.services import actor_for_human
from tests.fakes.stripe import SECRET_KEY, WEBHOOK_SECRET, FakeStripe, signed


@pytest.fixture
def stripe_fake(settings):
    fake = FakeStripe().start()
    settings.RETASC_STRIPE_SECRET_KEY = SECRET_KEY
    settings.RETASC_STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.RETASC_STRIPE_API_URL = fake.url
    yield fake
    fake.stop()


@pytest.fixture
def owner(world):
    return actor_for_human(user=world.owner, org=world.org)


def state(org) -> tuple:
    """What a refused or repeated event must leave as it was."""
    return (
        Org.objects.values_list("balance_micros", "activity_seq").get(pk=org.pk),
        LedgerEntry.objects.filter(org_id=org.pk).count(),
        StripeEvent.objects.count(),
        TopUp.objects.count(),
    )


def deliver(event, *, secret=WEBHOOK_SECRET, timestamp=None, body=None, client=None):
    payload, headers = signed(event, secret, timestamp=timestamp)
    return (client or Client()).post(
        "/hooks/stripe", data=body if body is not None else payload, content_type="application/json", headers=headers
    )


def _paid_session(fake, owner, dollars=25):
    session = topup_checkout(actor=owner, amount_dollars=dollars)
    return fake.completed(session["sessionId"])


# --- Checkout -------------------------------------------------------------------------------


def test_checkout_session_is_created_at_stripe_for_the_org(world, owner, stripe_fake, settings):
    before = state(world.org)

    answer = topup_checkout(actor=owner, amount_dollars=25, email="owner@acme.test")

    assert answer == {"sessionId": "cs_test_0001", "url": f"{stripe_fake.url}/c/pay/cs_test_0001"}
    [request] = stripe_fake.seen("POST", "/v1/checkout/sessions")
    assert request.header("authorization") == f"Bearer {SECRET_KEY}"
    form = stripe_fake.sessions["cs_test_0001"]["form"]
    assert form["mode"] == "payment"
    assert form["client_reference_id"] == world.org.slug
    assert form["metadata[org]"] == world.org.slug
    assert form["payment_intent_data[metadata][org]"] == world.org.slug
    assert (form["line_items[0][price_data][unit_amount]"], form["line_items[0][price_data][currency]"]) == ("2500", "usd")
    assert form["success_url"] == f"{settings.PUBLIC_URL}/org/billing/?topup=done"
    assert form["cancel_url"] == f"{settings.PUBLIC_URL}/org/billing/?topup=canceled"
    assert form["customer_email"] == "owner@acme.test"
    assert state(world.org) == before  # nothing is credited before Stripe says it was paid


@pytest.mark.parametrize("dollars", [10, 25, 50, 100])
def test_each_offered_amount_is_accepted(world, owner, stripe_fake, dollars):
    topup_checkout(actor=owner, amount_dollars=dollars)
    assert stripe_fake.sessions["cs_test_0001"]["amount_total"] == dollars * 100


@pytest.mark.parametrize("dollars", [0, 5, 26, 1000, "25", True, None, 25.0 + 0.5])
def test_other_amounts_are_refused_before_stripe_is_called(world, owner, stripe_fake, dollars):
    before = state(world.org)
    with pytest.raises(ServiceError) as err:
        topup_checkout(actor=owner, amount_dollars=dollars)
    assert (err.value.code, err.value.details) == ("INVALID_ARGUMENT", {"field": "amount"})
    assert stripe_fake.requests == []
    assert state(world.org) == before


def test_members_cannot_top_up(world, stripe_fake):
    member = actor_for_human(user=world.member, org=world.org)
    with pytest.raises(ServiceError) as err:
        topup_checkout(actor=member, amount_dollars=10)
    assert err.value.code == "FORBIDDEN"
    assert stripe_fake.requests == []


def test_without_stripe_keys_the_refusal_says_how_staff_grant_credit(world, owner, settings):
    settings.RETASC_STRIPE_SECRET_KEY = ""
    with pytest.raises(ServiceError) as err:
        topup_checkout(actor=owner, amount_dollars=10)
    assert err.value.code == "UNAVAILABLE"
    assert "staff" in err.value.tell_human and "Grant credit" in err.value.tell_human


def test_stripe_down_or_refusing_is_one_sentence_without_the_key(world, owner, stripe_fake):
    stripe_fake.fail_next(1, 401, {"error": {"type": "authentication_error", "message": f"Invalid API Key {SECRET_KEY}"}})
    with pytest.raises(ServiceError) as refused:
        topup_checkout(actor=owner, amount_dollars=10)
    stripe_fake.stop()
    with pytest.raises(ServiceError) as down:
        topup_checkout(actor=owner, amount_dollars=10)
    for err in (refused.value, down.value):
        assert err.code == "UNAVAILABLE"
        assert SECRET_KEY not in str(err.as_dict())


# --- the webhook ----------------------------------------------------------------------------


def test_a_paid_session_credits_the_org_once_however_often_delivered(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 25)
    balance = Org.objects.get(pk=world.org.pk).balance_micros

    first = deliver(event)

    assert (first.status_code, first.json()) == (
        200,
        {"status": "applied", "org": world.org.slug, "amountMicros": 25_000_000},
    )
    org = Org.objects.get(pk=world.org.pk)
    assert org.balance_micros == balance + 25_000_000
    row = LedgerEntry.objects.filter(org_id=org.pk).latest("pk")
    assert (row.action, row.tier, row.amount_micros, row.balance_after_micros, row.key_id) == (
        "topup",
        "credit",
        25_000_000,
        balance + 25_000_000,
        None,
    )
    receipt = Activity.objects.filter(org_id=org.pk).latest("seq")
    assert (receipt.verb, receipt.runtime) == ("topup", "stripe")
    assert receipt.changes["balanceMicros"] == [balance, balance + 25_000_000]
    assert receipt.changes["stripeSession"] == "cs_test_0001"

    # When: Stripe delivers the same event again, twice.
    after_first = state(world.org)
    again = [deliver(event), deliver(event)]

    # Then: acknowledged, and nothing more was credited.
    assert [(r.status_code, r.json()) for r in again] == [(200, {"status": "duplicate"})] * 2
    assert state(world.org) == after_first


def test_the_org_may_be_named_by_metadata_only(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 10)
    event["data"]["object"]["client_reference_id"] = None
    assert deliver(event).json()["status"] == "applied"
    assert LedgerEntry.objects.filter(org_id=world.org.pk, action="topup").count() == 1


def test_a_forged_signature_is_refused_and_changes_nothing(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 100)
    before = state(world.org)

    forged = deliver(event, secret="whsec_someone_else")
    payload, headers = signed(event)
    tampered_event = {**event, "data": {"object": {**event["data"]["object"], "amount_total": 10_000_000}}}
    tampered = deliver(event, body=signed(tampered_event)[0])  # a signature over another body
    unsigned = Client().post("/hooks/stripe", data=payload, content_type="application/json")
    garbled = Client().post(
        "/hooks/stripe", data=payload, content_type="application/json", headers={"Stripe-Signature": "v1=abc"}
    )

    for response in (forged, tampered, unsigned, garbled):
        assert response.status_code == 401
        assert response.json() == {"code": "UNAUTHORIZED", "message": "The Stripe-Signature header does not verify."}
    assert state(world.org) == before


def test_an_old_or_future_timestamp_is_refused_even_correctly_signed(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 10)
    before = state(world.org)

    old = deliver(event, timestamp=int(time.time()) - 301)
    future = deliver(event, timestamp=int(time.time()) + 301)

    for response in (old, future):
        assert response.status_code == 401
        assert response.json()["message"] == "The Stripe-Signature timestamp is outside the 5-minute tolerance."
    assert state(world.org) == before
    assert deliver(event, timestamp=int(time.time()) - 240).json()["status"] == "applied"  # inside the tolerance


def test_signature_with_several_v1_values_verifies_if_one_matches(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 10)
    payload, headers = signed(event)
    headers["Stripe-Signature"] = headers["Stripe-Signature"].replace("v1=", "v1=00ff,v1=")
    response = Client().post("/hooks/stripe", data=payload, content_type="application/json", headers=headers)
    assert response.json()["status"] == "applied"


def test_without_a_webhook_secret_the_endpoint_is_off(world, owner, stripe_fake, settings):
    event = _paid_session(stripe_fake, owner, 10)
    settings.RETASC_STRIPE_WEBHOOK_SECRET = ""
    before = state(world.org)
    response = deliver(event)
    assert (response.status_code, response.json()["code"]) == (404, "NOT_FOUND")
    assert state(world.org) == before
    assert Client().get("/hooks/stripe").status_code == 405


def test_unpaid_unknown_org_and_other_types_are_acknowledged_and_ignored(world, owner, stripe_fake):
    session = topup_checkout(actor=owner, amount_dollars=10)
    unpaid = stripe_fake.completed(session["sessionId"], paid=False)
    paid = stripe_fake.completed(session["sessionId"], event_id="evt_other_org")
    paid["data"]["object"].update(client_reference_id="no-such-org", metadata={"org": "no-such-org"})
    other = {"id": "evt_misc", "type": "customer.created", "data": {"object": {"id": "cus_1"}}}
    before = state(world.org)

    answers = [deliver(e).json() for e in (unpaid, paid, other)]

    assert answers == [
        {"status": "ignored", "reason": "not paid yet"},
        {"status": "ignored", "reason": "no such org"},
        {"status": "ignored", "reason": "event type not used"},
    ]
    assert state(world.org) == before


def test_a_body_that_is_not_an_event_is_refused(world, stripe_fake):
    before = state(world.org)
    response = deliver({"type": "checkout.session.completed"})  # no id
    assert (response.status_code, response.json()["code"]) == (400, "INVALID_ARGUMENT")
    payload = b"not json"
    ts = int(time.time())
    mac = hmac.new(WEBHOOK_SECRET.encode(), f"{ts}.".encode() + payload, hashlib.sha256).hexdigest()
    response = Client().post(
        "/hooks/stripe", data=payload, content_type="application/json", headers={"Stripe-Signature": f"t={ts},v1={mac}"}
    )
    assert (response.status_code, response.json()["code"]) == (400, "INVALID_ARGUMENT")
    assert state(world.org) == before


# --- refunds --------------------------------------------------------------------------------


def test_refunds_are_negative_entries_for_what_was_newly_refunded(world, owner, stripe_fake):
    # Given: a paid $25 top-up.
    event = _paid_session(stripe_fake, owner, 25)
    assert deliver(event).json()["status"] == "applied"
    session_id = event["data"]["object"]["id"]
    balance = Org.objects.get(pk=world.org.pk).balance_micros

    # When: $5 is refunded, then the rest (Stripe sends the cumulative amount refunded).
    partial = stripe_fake.refunded(session_id, cents=500)
    full = stripe_fake.refunded(session_id, cents=2500)
    answers = [deliver(partial).json(), deliver(full).json()]

    # Then: two negative entries, -$5 and -$20, each with a receipt.
    assert answers == [
        {"status": "applied", "org": world.org.slug, "amountMicros": -5_000_000},
        {"status": "applied", "org": world.org.slug, "amountMicros": -20_000_000},
    ]
    refunds = list(LedgerEntry.objects.filter(org_id=world.org.pk, action="refund").order_by("pk"))
    assert [(r.tier, r.amount_micros, r.balance_after_micros) for r in refunds] == [
        ("credit", -5_000_000, balance - 5_000_000),
        ("credit", -20_000_000, balance - 25_000_000),
    ]
    assert list(Activity.objects.filter(org_id=world.org.pk, verb="refund").values_list("runtime", flat=True)) == ["stripe"] * 2
    assert TopUp.objects.get(session_id=session_id).refunded_micros == 25_000_000

    # And: redelivered, or an older partial event arriving late, takes nothing more.
    after = state(world.org)
    late = stripe_fake.refunded(session_id, cents=1000)
    assert [deliver(partial).json(), deliver(late).json()] == [
        {"status": "duplicate"},
        {"status": "ignored", "reason": "already refunded"},
    ]
    assert state(world.org)[0] == after[0] and state(world.org)[1] == after[1]


def test_a_refund_may_take_the_balance_below_zero(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 10)
    deliver(event)
    Org.objects.filter(pk=world.org.pk).update(balance_micros=3_000_000)  # most of it was spent
    response = deliver(stripe_fake.refunded(event["data"]["object"]["id"], cents=1000))
    assert response.json()["amountMicros"] == -10_000_000
    assert Org.objects.get(pk=world.org.pk).balance_micros == -7_000_000


def test_a_refund_of_an_unknown_payment_is_refused_so_stripe_retries(world, owner, stripe_fake):
    event = _paid_session(stripe_fake, owner, 10)  # completed at Stripe, its event not yet delivered
    refund = stripe_fake.refunded(event["data"]["object"]["id"], cents=1000)
    before = state(world.org)

    response = deliver(refund)

    assert (response.status_code, response.json()["code"]) == (404, "NOT_FOUND")
    assert state(world.org) == before
    # Once the top-up has arrived, the retried refund applies.
    deliver(event)
    assert deliver(refund).json()["amountMicros"] == -10_000_000
