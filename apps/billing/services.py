"""Billing writes: the monthly cap, credit (staff grants and corrections, card top-ups
and their refunds).

Every change to the balance is a ledger entry written by the unit of work under the org
row lock (``unit.credit``), and a receipt naming who made it and why. The balance is
never set directly.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.billing import stripe_api
from apps.billing.models import StripeEvent, TopUp
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.unit import mutation
from apps.orgs.actor import Actor
from apps.orgs.models import Org

log = logging.getLogger(__name__)

MAX_CAP_MICROS = 10**13  # $10 million a month: anything above is a typo
MAX_CREDIT_MICROS = 10**12  # $1 million in one staff entry: anything above is a typo
TOPUP_DOLLARS = (10, 25, 50, 100)
MICROS_PER_DOLLAR = 1_000_000


def billing_cap_set(*, actor: Actor, cap_micros: int | None) -> dict:
    """Set (or, with None, remove) the org's monthly spend cap. Owners only.

    Not charged: raising a cap must work exactly when the cap blocks everything else.
    The change is a receipt like any other mutation.
    """
    if not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner can set the monthly spend cap.")
    if cap_micros is not None and (
        isinstance(cap_micros, bool) or not isinstance(cap_micros, int) or not 0 <= cap_micros <= MAX_CAP_MICROS
    ):
        raise invalid(
            "capMicros", f"The monthly cap is a whole number of micro-dollars from 0 to {MAX_CAP_MICROS}, or null for none."
        )
    with mutation(actor, "billing_cap_set", charge=False) as unit:
        # The org row is locked first here (and again, re-entrantly, when the unit
        # flushes): nothing else is locked in this action, so the order rule holds, and
        # the receipt's "before" is the value this update replaced.
        before = Org.objects.select_for_update(no_key=True).only("monthly_cap_micros").get(pk=actor.org.pk).monthly_cap_micros
        if before != cap_micros:
            Org.objects.filter(pk=actor.org.pk).update(monthly_cap_micros=cap_micros)
            unit.record("billing_cap_set", changes={"monthlyCapMicros": [before, cap_micros]})
    return {"monthlyCapMicros": cap_micros}


def _reason(note) -> str:
    if not isinstance(note, str) or not note.strip() or len(note.strip()) > 200:
        raise invalid("reason", "A reason is required: one line of text up to 200 characters.")
    return note.strip()


def _credit(*, actor: Actor, amount_micros: int, note: str, action: str, verb: str, changes=None) -> int:
    """One balance change as a ledger entry plus a receipt with the balance before and after."""
    with mutation(actor, verb, charge=False) as unit:
        _credit_in(unit, amount_micros=amount_micros, note=note, action=action, changes=changes)
    return unit.balance_after_micros


def _credit_in(unit, *, amount_micros: int, note: str, action: str, changes=None) -> None:
    """Inside a mutation: the ledger entry and its receipt.

    The org row is locked here (and again, re-entrantly, when the unit flushes) so the
    receipt's "before" is the balance this entry moves. Nothing is locked after it; a
    caller that locks another row (a top-up being refunded) locks it before.
    """
    org_id = unit.actor.org.pk
    before = Org.objects.select_for_update(no_key=True).only("balance_micros").get(pk=org_id).balance_micros
    unit.credit(amount_micros, note=note, principal_id=unit.actor.principal_id, action=action)
    unit.record(unit.action, changes={"balanceMicros": [before, before + amount_micros], "reason": note, **(changes or {})})


def _staff_actor(org: Org, principal_id) -> Actor:
    # Staff act from the admin: the receipt names the staff user, runtime "staff".
    return Actor(org=org, principal_id=principal_id, key=None, runtime="staff" if principal_id else "system")


def credit_grant(*, org: Org, amount_micros: int, note: str, principal_id=None) -> int:
    """Add credit (a staff grant; the system's own grants). Returns the new balance.

    The credit goes through the unit of work: its ledger entry and the balance change
    under the org row lock, like every charge (the new-org credit takes the same path).
    A receipt ``credit_grant`` names the staff user and the reason.
    """
    if isinstance(amount_micros, bool) or not isinstance(amount_micros, int) or not 0 < amount_micros <= MAX_CREDIT_MICROS:
        raise invalid("amount", f"Credit must be positive, at most {MAX_CREDIT_MICROS} micro-dollars.")
    note = _reason(note)
    return _credit(
        actor=_staff_actor(org, principal_id), amount_micros=amount_micros, note=note, action="credit", verb="credit_grant"
    )


def credit_correct(*, org: Org, amount_micros: int, reason: str, principal_id) -> int:
    """A staff correction: a signed ledger entry (negative takes credit back), with a reason.

    It may take the balance below zero (dispatch is then refused until credit comes back),
    and it never counts as this month's spend. Returns the new balance.
    """
    if (
        isinstance(amount_micros, bool)
        or not isinstance(amount_micros, int)
        or amount_micros == 0
        or abs(amount_micros) > MAX_CREDIT_MICROS
    ):
        raise invalid("amount", f"A correction is a non-zero amount of at most {MAX_CREDIT_MICROS} micro-dollars either way.")
    reason = _reason(reason)
    return _credit(
        actor=_staff_actor(org, principal_id),
        amount_micros=amount_micros,
        note=reason,
        action="correction",
        verb="credit_correct",
    )


# --- card top-ups (Stripe Checkout) ----------------------------------------------------------


def topup_checkout(*, actor: Actor, amount_dollars, email: str | None = None) -> dict:
    """Start a Stripe Checkout for ``amount_dollars`` of credit. Owners only.

    Nothing is written: the credit arrives with the signed ``checkout.session.completed``
    event (``stripe_event_apply``). The buyer returns to the Dash's billing page at the
    public URL (never a URL built from a request's Host). Answers ``{sessionId, url}``.
    """
    if not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner can add credit.")
    if isinstance(amount_dollars, bool) or amount_dollars not in TOPUP_DOLLARS:
        raise invalid("amount", "A top-up is 10, 25, 50 or 100 dollars.")
    if not stripe_api.checkout_enabled():
        raise ServiceError(
            "UNAVAILABLE",
            "Card top-ups are not configured on this server.",
            tell_human="Ask the server's staff to grant credit in the admin (Orgs > Grant credit).",
        )
    session = stripe_api.checkout_session_create(
        org_slug=actor.org.slug,
        amount_cents=amount_dollars * 100,
        success_url=f"{settings.PUBLIC_URL}/org/billing/?topup=done",
        cancel_url=f"{settings.PUBLIC_URL}/org/billing/?topup=canceled",
        email=email,
    )
    return {"sessionId": session["id"], "url": session["url"]}


def _claim_event(event_id: str, type_: str, org: Org, amount_micros: int, *extra_rows) -> bool:
    """Write the event's unique row (and any other unique rows) in a savepoint. False when
    it was already applied: a redelivery, or the same delivery racing itself (on
    PostgreSQL the second insert waits for the first transaction, then fails)."""
    try:
        with transaction.atomic():
            StripeEvent.objects.create(event_id=event_id, type=type_, org=org, amount_micros=amount_micros)
            for row in extra_rows:
                row.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def _event_org(obj: dict) -> Org | None:
    slug = obj.get("client_reference_id") or (obj.get("metadata") or {}).get("org")
    if not isinstance(slug, str) or not slug:
        return None
    return Org.objects.filter(slug=slug, deleted_at__isnull=True).first()


def _stripe_actor(org: Org) -> Actor:
    return Actor(org=org, principal_id=None, key=None, runtime="stripe")


def _apply_checkout(event_id: str, type_: str, obj: dict) -> dict:
    if obj.get("payment_status") != "paid":
        return {"status": "ignored", "reason": "not paid yet"}  # async methods: the success event follows
    amount_cents = obj.get("amount_total")
    if obj.get("currency") != "usd" or isinstance(amount_cents, bool) or not isinstance(amount_cents, int) or amount_cents <= 0:
        return {"status": "ignored", "reason": "not a USD payment"}
    org = _event_org(obj)
    if org is None:
        log.warning("Stripe checkout session %s names no org of this server", obj.get("id"))
        return {"status": "ignored", "reason": "no such org"}
    amount = amount_cents * stripe_api.MICROS_PER_CENT
    session_id = str(obj.get("id") or event_id)[:255]
    topup = TopUp(org=org, session_id=session_id, payment_intent=str(obj.get("payment_intent") or "")[:255], amount_micros=amount)
    note = f"Card top-up (Stripe {session_id})"[:200]
    with mutation(_stripe_actor(org), "topup", charge=False) as unit:
        # The event's row and the session's row first: a second delivery stops here.
        if not _claim_event(event_id, type_, org, amount, topup):
            return {"status": "duplicate"}
        _credit_in(unit, amount_micros=amount, note=note, action="topup", changes={"stripeSession": session_id})
    return {"status": "applied", "org": org.slug, "amountMicros": amount}


def _apply_refund(event_id: str, type_: str, obj: dict) -> dict:
    intent = obj.get("payment_intent")
    refunded_cents = obj.get("amount_refunded")
    if not isinstance(intent, str) or not intent or not isinstance(refunded_cents, int) or isinstance(refunded_cents, bool):
        return {"status": "ignored", "reason": "not a refund of a payment"}
    found = TopUp.objects.filter(payment_intent=intent).select_related("org").first()
    if found is None:
        # Perhaps the top-up's own event has not arrived yet: refuse, so Stripe retries.
        raise not_found("A top-up paid by this charge")
    org, charge_id = found.org, str(obj.get("id") or "")[:100]
    note = f"Card refund (Stripe {charge_id})"[:200]
    with mutation(_stripe_actor(org), "refund", charge=False) as unit:
        # The top-up row first, then the org row (in _credit_in): the lock order. Stripe's
        # amount_refunded is cumulative: this event owes what was not yet taken back.
        topup = TopUp.objects.select_for_update().get(pk=found.pk)
        total = min(refunded_cents * stripe_api.MICROS_PER_CENT, topup.amount_micros)
        delta = total - topup.refunded_micros
        if not _claim_event(event_id, type_, org, -max(delta, 0)):
            return {"status": "duplicate"}
        if delta <= 0:
            return {"status": "ignored", "reason": "already refunded"}  # an older event arriving late
        TopUp.objects.filter(pk=topup.pk).update(refunded_micros=total)
        _credit_in(unit, amount_micros=-delta, note=note, action="refund", changes={"stripeCharge": charge_id})
    return {"status": "applied", "org": org.slug, "amountMicros": -delta}


EVENT_HANDLERS = {
    "checkout.session.completed": _apply_checkout,
    "checkout.session.async_payment_succeeded": _apply_checkout,
    "charge.refunded": _apply_refund,
}


def stripe_event_apply(*, event) -> dict:
    """Apply one verified Stripe event, exactly once per event id (SPEC §11).

    ``checkout.session.completed`` (paid) credits the org named by the session's
    ``client_reference_id`` or ``metadata.org``; ``charge.refunded`` takes back what was
    newly refunded of that top-up, as a negative entry. Other types are acknowledged and
    ignored. Answers ``{status: applied | duplicate | ignored | ..., ...}``.
    """
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event["id"]:
        raise invalid("event", "A Stripe event is a JSON object with an id.")
    obj = (event.get("data") or {}).get("object") if isinstance(event.get("data"), dict) else None
    handler = EVENT_HANDLERS.get(event.get("type"))
    if handler is None:
        return {"status": "ignored", "reason": "event type not used"}
    if not isinstance(obj, dict):
        raise invalid("data.object", "The event carries no object.")
    return handler(event["id"], event["type"], obj)
