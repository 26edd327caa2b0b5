"""Reads over metering: what an org spent this month, and where its billing stands.

Both are scoped to the actor's org and read-only. They do not charge: the interface that
serves them (MCP tool, API view) meters the read like any other (``metered_read``).
Months are UTC calendar months, the same months the monthly cap counts
(``apps.work.writer``).
"""

from __future__ import annotations

from datetime import UTC

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone

from apps.billing import pricing
from apps.billing.models import LedgerEntry, Tier
from apps.core.formats import iso
from apps.orgs.actor import Actor
from apps.orgs.models import Org

RECENT_ROWS = 20


def _month_start(now):
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _charges_this_month(org_id, now):
    # Charges carry a tier (credits carry tier "credit"); a charge clamped to zero at an
    # empty balance is still an action taken, so it is counted.
    return LedgerEntry.objects.filter(org_id=org_id, created_at__gte=_month_start(now), tier__in=Tier.values)


def usage_summary(*, actor: Actor) -> dict:
    """This month's spend by tier, by key (with its runtime and person) and by runtime.

    Three queries whatever the volume: by tier, by key, by action.
    """
    now = timezone.now()
    charges = _charges_this_month(actor.org.pk, now)
    by_tier = {tier: {"micros": 0, "count": 0} for tier in Tier.values}
    for row in charges.values("tier").annotate(spent=Sum("amount_micros"), n=Count("pk")):
        by_tier[row["tier"]] = {"micros": -row["spent"], "count": row["n"]}
    by_key, by_runtime = [], {}
    rows = (
        charges.values("key_id", "key__prefix", "key__label", "key__runtime", "principal__email")
        .annotate(spent=Sum("amount_micros"), n=Count("pk"))
        .order_by("spent", "key__prefix")  # amounts are negative: biggest spender first
    )
    for row in rows:
        runtime = row["key__runtime"] or "unknown"
        by_key.append(
            {
                "key": row["key__prefix"],
                "label": row["key__label"],
                "runtime": runtime,
                "principal": row["principal__email"],
                "micros": -row["spent"],
                "count": row["n"],
            }
        )
        slot = by_runtime.setdefault(runtime, {"micros": 0, "count": 0})
        slot["micros"] += -row["spent"]
        slot["count"] += row["n"]
    by_action = {
        row["action"]: {"micros": -row["spent"], "count": row["n"]}
        for row in charges.values("action").annotate(spent=Sum("amount_micros"), n=Count("pk")).order_by("action")
    }
    return {
        "month": now.strftime("%Y-%m"),
        "spentMicros": sum(t["micros"] for t in by_tier.values()),
        "actions": sum(t["count"] for t in by_tier.values()),
        "byTier": by_tier,
        "byKey": by_key,
        "byRuntime": by_runtime,
        "byAction": by_action,
    }


def billing_block(org: Org, now=None) -> str | None:
    """The code a charged dispatch would be refused with now, or None (enforcement aside)."""
    now = now or timezone.now()
    if org.balance_micros < pricing.price_of(Tier.DISPATCH):
        return "BILLING_INACTIVE"
    spent = org.spend_month_micros if org.spend_month == now.strftime("%Y-%m") else 0
    if org.monthly_cap_micros is not None and spent + pricing.price_of(Tier.DISPATCH) > org.monthly_cap_micros:
        return "MONTHLY_CAP_REACHED"
    return None


def billing_summary(*, actor: Actor) -> dict:
    """Balance, monthly cap, this month's spend, enforcement, prices and recent ledger rows."""
    now = timezone.now()
    org = Org.objects.only("balance_micros", "monthly_cap_micros", "spend_month", "spend_month_micros").get(pk=actor.org.pk)
    enforced = bool(settings.RETASC_BILLING_ENFORCE)
    block = billing_block(org, now)
    recent = (
        LedgerEntry.objects.filter(org_id=org.pk).select_related("key", "principal").order_by("-created_at", "-pk")[:RECENT_ROWS]
    )
    return {
        "balanceMicros": org.balance_micros,
        "monthlyCapMicros": org.monthly_cap_micros,
        "month": now.strftime("%Y-%m"),
        "monthSpendMicros": org.spend_month_micros if org.spend_month == now.strftime("%Y-%m") else 0,
        "enforced": enforced,
        # What would block a dispatch now; with enforcement off this is advisory only.
        "blocked": block if enforced else None,
        "wouldBlock": block,
        "prices": {tier: pricing.price_of(tier) for tier in Tier.values},
        "recent": [
            {
                "at": iso(row.created_at),
                "action": row.action,
                "tier": row.tier,
                "amountMicros": row.amount_micros,
                "balanceAfterMicros": row.balance_after_micros,
                "key": row.key.prefix if row.key_id else None,
                "principal": row.principal.email if row.principal_id else None,
                "note": row.note,
            }
            for row in recent
        ],
    }
