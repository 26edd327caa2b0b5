"""Runtime usage (tokens, sessions) that agents' runtimes report, per key, runtime and day.

Written by ``usage_report`` (``POST /api/v1/usage/reports``, sent by ``retasc usage push``); read
by the fleet view and the member's page. Counts only, never text.
"""

from __future__ import annotations

from datetime import date, timedelta

from django.db.models import Sum
from django.utils import timezone

from apps.billing.models import RuntimeUsage
from apps.core.errors import ServiceError, invalid
from apps.core.unit import mutation
from apps.orgs.actor import Actor

MAX_DAYS = 400
COUNTERS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadTokens": "cache_read_tokens",
    "sessions": "sessions",
    "messages": "messages",
}
MAX_COUNT = 10**13


def _day(value) -> date:
    try:
        day = date.fromisoformat(str(value))
    except ValueError:
        raise invalid("days", f"{value!r} is not a date (YYYY-MM-DD).") from None
    today = timezone.now().date()
    if not today - timedelta(days=MAX_DAYS) <= day <= today + timedelta(days=1):
        raise invalid("days", f"{day} is outside the last {MAX_DAYS} days.")
    return day


def _row(item) -> dict:
    if not isinstance(item, dict):
        raise invalid("days", "each entry of days is an object {day, model, inputTokens, ...}.")
    unknown = set(item) - {"day", "model", *COUNTERS}
    if unknown:
        raise invalid("days", f"unknown fields in a days entry: {', '.join(sorted(unknown))}.")
    model = item.get("model") or ""
    if not isinstance(model, str) or len(model) > 100:
        raise invalid("days", "model is a name of at most 100 characters.")
    row = {"day": _day(item.get("day")), "model": model.strip()}
    for name, column in COUNTERS.items():
        value = item.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise invalid("days", f"{name} is a whole number from 0.")
        row[column] = value
    return row


def usage_report(*, actor: Actor, runtime, days) -> dict:
    """Store a runtime's per-day totals for the calling key (each replaces that day's row)."""
    if not actor.is_agent:
        raise ServiceError("FORBIDDEN", "Usage is reported with an agent key (retasc usage push in a bound folder).")
    if not isinstance(runtime, str) or not runtime.strip() or len(runtime) > 40:
        raise invalid("runtime", "runtime is the reporting runtime's short name, e.g. claude-code or codex.")
    if not isinstance(days, list) or len(days) > MAX_DAYS * 20:
        raise invalid("days", "days is a list of per-day totals.")
    rows = [_row(item) for item in days]  # every entry checked before anything is written
    runtime = runtime.strip().lower()
    with mutation(actor, "usage_report", charge=False) as unit:
        for row in rows:
            RuntimeUsage.objects.update_or_create(
                key=actor.key,
                runtime=runtime,
                day=row.pop("day"),
                model=row.pop("model"),
                defaults={**row, "org": actor.org, "principal_id": actor.principal_id},
            )
        unit.record("usage_reported", changes={"usage": [None, {"runtime": runtime, "days": len(rows)}]})
    return {"runtime": runtime, "stored": len(rows)}


def usage_totals(*, org_id, since: date, principal_id=None) -> list[dict]:
    """Totals per runtime (and person) since ``since``: the fleet view's and member page's rows."""
    qs = RuntimeUsage.objects.filter(org_id=org_id, day__gte=since)
    if principal_id is not None:
        qs = qs.filter(principal_id=principal_id)
    rows = (
        qs.values("runtime", "principal__email")
        .annotate(
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            sessions=Sum("sessions"),
            messages=Sum("messages"),
        )
        .order_by("runtime", "principal__email")
    )
    return [{**row, "email": row.pop("principal__email")} for row in rows]


def usage_by_day(*, org_id, since: date, principal_id=None) -> list[dict]:
    qs = RuntimeUsage.objects.filter(org_id=org_id, day__gte=since)
    if principal_id is not None:
        qs = qs.filter(principal_id=principal_id)
    return list(
        qs.values("day", "runtime")
        .annotate(input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"), sessions=Sum("sessions"))
        .order_by("-day", "runtime")
    )
