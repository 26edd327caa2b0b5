"""Reads over metering: what an org spent this month, and where its billing stands.

Both are scoped to the actor's org and read-only. They do not charge: the interface that
serves them (MCP tool, API view) meters the read like any other (``metered_read``).
Months are UTC calendar months, the same months the monthly cap counts
(``apps.work.writer``).
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.billing import pricing, stripe_api
from apps.billing.blocks import billing_refusal
from apps.billing.models import LedgerEntry, Tier
from apps.core.errors import ServiceError, invalid
from apps.core.formats import iso
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Org

RECENT_ROWS = 20
LEDGER_PAGE = 50
LEDGER_PAGE_MAX = 200
CHART_DAYS = 30
# Ledger filter "tier": the charge tiers, or "credit" for every credit, top-up, refund and
# correction (they share that tier and never count as spend).
LEDGER_TIERS = (*Tier.values, "credit")


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
    recent = LedgerEntry.objects.filter(org_id=org.pk).select_related("key", "principal").order_by("-pk")[:RECENT_ROWS]
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


# --- the owner's views of the ledger -------------------------------------------------------


def _owner_only(actor: Actor) -> None:
    if not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner can see the org's billing.")


def ledger_shape(row: LedgerEntry) -> dict:
    return {
        "id": row.pk,
        "at": iso(row.created_at),
        "action": row.action,
        "tier": row.tier,
        "amountMicros": row.amount_micros,
        "balanceAfterMicros": row.balance_after_micros,
        "key": row.key.prefix if row.key_id else None,
        "runtime": row.key.runtime if row.key_id else None,
        "principal": row.principal.email if row.principal_id else None,
        "note": row.note,
    }


def _text_filter(value, name: str, limit: int) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise invalid(name, f"{name} is text up to {limit} characters.")
    return value.strip() or None


def ledger_filtered(*, actor: Actor, key=None, runtime=None, tier=None):
    """The org's ledger rows, newest first, filtered by key prefix, runtime and tier."""
    _owner_only(actor)
    key, runtime, tier = _text_filter(key, "key", 20), _text_filter(runtime, "runtime", 40), _text_filter(tier, "tier", 20)
    if tier is not None and tier not in LEDGER_TIERS:
        raise invalid("tier", f"tier is one of {', '.join(LEDGER_TIERS)}.")
    rows = LedgerEntry.objects.filter(org_id=actor.org.pk).select_related("key", "principal").order_by("-pk")
    if key:  # a key's rows include those of its session keys
        rows = rows.filter(Q(key__prefix=key) | Q(key__parent__prefix=key))
    if runtime:
        rows = rows.filter(key__runtime=runtime)
    if tier:
        rows = rows.filter(tier=tier)
    return rows


def ledger_page(*, actor: Actor, key=None, runtime=None, tier=None, cursor=None, limit=None) -> dict:
    """One page of the ledger, newest first: ``{entries, nextCursor}``. The cursor is the
    id of the last row seen, so rows written meanwhile never shift a page. Two queries
    at most (the page, and nothing else: keys and people are joined)."""
    rows = ledger_filtered(actor=actor, key=key, runtime=runtime, tier=tier)
    if cursor not in (None, ""):
        if not str(cursor).isdigit():
            raise invalid("cursor", "cursor is the nextCursor of a previous page.")
        rows = rows.filter(pk__lt=int(cursor))
    if limit in (None, ""):
        limit = LEDGER_PAGE
    if isinstance(limit, str) and limit.isdigit():
        limit = int(limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LEDGER_PAGE_MAX:
        raise invalid("limit", f"limit is a whole number from 1 to {LEDGER_PAGE_MAX}.")
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return {"entries": [ledger_shape(r) for r in page], "nextCursor": str(page[-1].pk) if more and page else None}


CSV_COLUMNS = ["at", "action", "tier", "amount_usd", "balance_after_usd", "key", "runtime", "principal", "note"]


def _usd(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


def _cell(text: str) -> str:
    # Free text (a runtime, a note, an address) that a spreadsheet would run as a formula
    # is written as text.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def ledger_csv(*, actor: Actor, key=None, runtime=None, tier=None):
    """The filtered ledger as CSV, newest first: a generator of text chunks, read from the
    database in batches so memory stays flat whatever its length. Amounts in dollars with
    six decimals (exact micro-dollars)."""
    rows = ledger_filtered(actor=actor, key=key, runtime=runtime, tier=tier)

    def chunks():
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(CSV_COLUMNS)
        for n, row in enumerate(rows.iterator(chunk_size=500), 1):
            shape = ledger_shape(row)
            writer.writerow(
                [
                    shape["at"],
                    _cell(shape["action"]),
                    shape["tier"],
                    _usd(row.amount_micros),
                    _usd(row.balance_after_micros),
                    _cell(shape["key"] or ""),
                    _cell(shape["runtime"] or ""),
                    _cell(shape["principal"] or ""),
                    _cell(row.note),
                ]
            )
            if n % 500 == 0:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue()

    return chunks()


def spend_by_day(*, org_id, now=None, days: int = CHART_DAYS) -> dict:
    """Charges per UTC day and runtime over the last ``days`` days (today included), in
    one query: ``{"days": [date, ...], "runtimes": [...], "series": {runtime: [micros per day]}}``,
    runtimes ordered by total spend, biggest first."""
    now = now or timezone.now()
    today = now.astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    rows = (
        LedgerEntry.objects.filter(org_id=org_id, created_at__gte=start, tier__in=Tier.values)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "key__runtime")
        .annotate(spent=Sum("amount_micros"))
        .order_by()
    )
    dates = [first + timedelta(days=i) for i in range(days)]
    index = {d: i for i, d in enumerate(dates)}
    series: dict[str, list[int]] = {}
    for row in rows:
        runtime = row["key__runtime"] or "unknown"
        slot = series.setdefault(runtime, [0] * days)
        day = row["day"]
        if day in index:
            slot[index[day]] += -row["spent"]
    runtimes = sorted(series, key=lambda r: (-sum(series[r]), r))
    return {"days": dates, "runtimes": runtimes, "series": {r: series[r] for r in runtimes}}


def billing_overview(*, actor: Actor) -> dict:
    """Everything the owner's billing page shows but the ledger: the summary, the days of
    spend the balance covers at this month's rate, spend per day and per runtime."""
    _owner_only(actor)
    now = timezone.now()
    summary = billing_summary(actor=actor)
    month_start = _month_start(now)
    elapsed_days = max((now - month_start).total_seconds() / 86400, 1.0)
    daily = summary["monthSpendMicros"] / elapsed_days
    chart = spend_by_day(org_id=actor.org.pk, now=now)
    by_runtime = sorted(((r, sum(chart["series"][r])) for r in chart["runtimes"]), key=lambda pair: (-pair[1], pair[0]))
    return {
        **summary,
        "dailyRateMicros": round(daily),
        # None: nothing spent this month, so no rate to divide by.
        "daysCovered": (max(summary["balanceMicros"], 0) / daily) if daily > 0 else None,
        "capUsedFraction": (
            min(summary["monthSpendMicros"] / summary["monthlyCapMicros"], 1.0) if summary["monthlyCapMicros"] else None
        ),
        "chart": chart,
        "byRuntime30d": [{"runtime": r, "micros": m} for r, m in by_runtime],
        "topups": stripe_api.checkout_enabled(),
    }


def ledger_filter_choices(*, actor: Actor) -> dict:
    """The keys (prefix, label, runtime) and runtimes an owner can filter the ledger by."""
    _owner_only(actor)
    keys = list(
        AgentKey.objects.filter(org_id=actor.org.pk, parent__isnull=True)
        .order_by("runtime", "prefix")
        .values("prefix", "label", "runtime")
    )
    return {"keys": keys, "runtimes": sorted({k["runtime"] for k in keys}), "tiers": list(LEDGER_TIERS)}


def billing_banner(*, actor: Actor) -> dict | None:
    """For the Dash's banner: the block an owner should see now, as ``{code, message,
    tellHuman}``, or None (members see none; nothing blocks while enforcement is off)."""
    if not actor.is_owner or not settings.RETASC_BILLING_ENFORCE:
        return None
    code = billing_block(actor.org)
    return billing_refusal(code).as_dict() if code else None
