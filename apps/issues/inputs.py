"""Parsing of user-supplied values shared by every interface. Each raises INVALID_ARGUMENT."""

from __future__ import annotations

import json
import re
import zoneinfo
from datetime import UTC, date, datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from apps.core.errors import invalid
from apps.core.inputs import MAX_BODY, brief, clean, offset, ref, text  # noqa: F401 (re-exported: the text parsers)

MAX_TITLE = 300
MAX_ITEMS = 50
_HEX = re.compile(r"^#[0-9a-fA-F]{6}$")
# Deadlines outside this window are mistakes, not plans.
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
_HORIZON = timedelta(days=366 * 50)


def boolean(value, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise invalid(field, f"{field} must be true or false.")


def priority(value) -> int:
    if isinstance(value, str) and len(value.strip()) > 3:
        value = "x"  # never parse a 10,000-digit number
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise invalid("priority", "priority is 0 (none), 1 (urgent), 2 (high), 3 (medium) or 4 (low).") from None
    if isinstance(value, bool) or not 0 <= number <= 4 or (isinstance(value, float) and value != number):
        raise invalid("priority", "priority is 0 (none), 1 (urgent), 2 (high), 3 (medium) or 4 (low).")
    return number


def due(value, *, org_timezone: str) -> datetime | None:
    """Epoch milliseconds, an ISO datetime, or a date (end of that day in the org's zone)."""
    if value is None or value == "":
        return None
    parsed: datetime | None = None
    if isinstance(value, bool):
        raise invalid("dueAt", "dueAt must be epoch milliseconds, an ISO datetime or a date.")
    if isinstance(value, (int, float)) or (isinstance(value, str) and re.fullmatch(r"-?\d{9,}", value.strip())):
        try:
            millis = int(value)
        except (OverflowError, ValueError):  # inf and NaN (JSON parsers accept both)
            raise invalid("dueAt", "dueAt is out of range.") from None
        if millis < 0:
            raise invalid("dueAt", "dueAt must not be negative.")
        try:
            parsed = datetime.fromtimestamp(millis / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise invalid("dueAt", "dueAt is out of range.") from None
    elif isinstance(value, str):
        raw = value.strip()
        day = None
        try:
            day = parse_date(raw)
        except ValueError:
            raise invalid("dueAt", f"{brief(raw)!r} is not a valid date.") from None
        if day is not None:
            return _end_of_day(day, org_timezone)
        try:
            parsed = parse_datetime(raw.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is None:
            raise invalid("dueAt", f"{brief(raw)!r} is not a date (2026-12-01), an ISO datetime, or epoch milliseconds.")
        if timezone.is_naive(parsed):
            parsed = parsed.replace(tzinfo=zoneinfo.ZoneInfo(org_timezone))
    else:
        raise invalid("dueAt", "dueAt must be epoch milliseconds, an ISO datetime or a date.")
    return _in_window(parsed)


def _end_of_day(day: date, tz: str) -> datetime:
    local = datetime.combine(day, time(23, 59, 59, 999000), tzinfo=zoneinfo.ZoneInfo(tz))
    return _in_window(local)


def _in_window(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    if moment < _EARLIEST or moment > timezone.now() + _HORIZON:
        raise invalid("dueAt", "dueAt must be between the year 2000 and 50 years from now.")
    return moment


def string_list(value, field: str, *, item_limit: int = 2000) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise invalid(field, f"{field} must be a list of text.")
    if len(value) > MAX_ITEMS:
        raise invalid(field, f"{field} has more than {MAX_ITEMS} entries.")
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise invalid(field, f"every entry of {field} must be non-empty text.")
        if len(item) > item_limit:
            raise invalid(field, f"an entry of {field} is longer than {item_limit} characters.")
        out.append(clean(item, field).strip())
    return out


def _evidence_entry(item) -> str | dict:
    """Text, or an object of fields (for a ``required_fields`` check)."""
    if isinstance(item, dict):
        if len(json.dumps(item, default=str)) > 2000:
            raise invalid("evidence", "an evidence object is longer than 2000 characters.")
        return item
    if not isinstance(item, str):
        raise invalid("evidence", "evidence entries are text or objects.")
    if len(item) > 2000:
        raise invalid("evidence", "an entry of evidence is longer than 2000 characters.")
    return clean(item, "evidence").strip()


def evidence(value, criteria: int) -> list:
    """A list (one entry per criterion, in order) or an object keyed by criterion index.

    An entry is text, or an object of fields for a criterion with a ``required_fields``
    check (apps.issues.acceptance)."""
    if isinstance(value, dict):
        out: list = [""] * criteria
        for key, item in value.items():
            try:
                index = int(key)
            except (TypeError, ValueError):
                raise invalid("evidence", "evidence keys are criterion indexes (0, 1, ...).") from None
            if not 0 <= index < criteria:
                raise invalid("evidence", f"there is no acceptance criterion {index}.")
            out[index] = _evidence_entry(item)
        return out
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise invalid("evidence", "evidence must be a list of text.")
    if len(value) > criteria:
        raise invalid("evidence", f"{len(value)} evidence entries for {criteria} acceptance criteria.")
    items = [_evidence_entry(item) for item in value]
    if any(item in ("", {}) for item in items):
        raise invalid("evidence", "every entry of evidence must be non-empty.")
    return items + [""] * (criteria - len(items))


def color(value) -> str:
    if value is None:
        return "#6b7280"
    if not isinstance(value, str) or not _HEX.match(value):
        raise invalid("color", "color is #rrggbb.")
    return value.lower()


def url(value) -> str:
    value = text(value, "url", required=True, limit=2000, one_line=True)
    if not re.match(r"^https?://[^\s/$.?#]\S+$", value):
        raise invalid("url", "url must be an http(s) address.")
    return value
