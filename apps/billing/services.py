"""Billing writes: the monthly cap, and credit (staff grants, top-ups)."""

from __future__ import annotations

from apps.core.errors import ServiceError, invalid
from apps.core.unit import mutation
from apps.orgs.actor import Actor
from apps.orgs.models import Org

MAX_CAP_MICROS = 10**13  # $10 million a month: anything above is a typo


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


def credit_grant(*, org: Org, amount_micros: int, note: str, principal_id=None) -> int:
    """Add credit (staff grants, top-ups). Returns the new balance.

    The credit goes through the unit of work: its ledger entry and the balance change
    under the org row lock, like every charge (the new-org credit takes the same path).
    """
    if isinstance(amount_micros, bool) or not isinstance(amount_micros, int) or amount_micros <= 0:
        raise invalid("amount", "Credit must be positive.")
    with mutation(Actor.system(org), "credit", charge=False) as unit:
        unit.credit(amount_micros, note=note, principal_id=principal_id)
    return unit.balance_after_micros
