"""Parsing of user-supplied text, shared by every layer (orgs' lookups included).

Each refusal is ``INVALID_ARGUMENT`` with one short sentence that names the field and
never repeats the value. apps.issues.inputs re-exports these beside the issue-specific
parsers (priorities, deadlines, lists).
"""

from __future__ import annotations

import re

from apps.core.errors import invalid

MAX_BODY = 200_000

# Line breaks and the other C0 controls (a tab is allowed), DEL, and Unicode's own line
# and paragraph separators: none belongs in a one-line value (a carriage return in an
# upload's filename used to break that file's download headers for ever).
_NOT_ONE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


def clean(value: str, field: str) -> str:
    """Refuse what no text field can store: NUL (PostgreSQL's text refuses it) and lone
    surrogates (not encodable as UTF-8). Every text input passes here."""
    if "\x00" in value:
        raise invalid(field, f"{field} must not contain NUL characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(field, f"{field} is not valid Unicode text (it has a lone surrogate).") from None
    return value


def text(value, field: str, *, required: bool = False, limit: int = MAX_BODY, one_line: bool = False) -> str | None:
    if value is None:
        if required:
            raise invalid(field, f"{field} is required.")
        return None
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be text.")
    if len(value) > limit * 2 + 1000:  # checked again after strip; never scan megabytes
        raise invalid(field, f"{field} is longer than {limit} characters.")
    value = clean(value, field).strip()
    if required and not value:
        raise invalid(field, f"{field} must not be empty.")
    if len(value) > limit:
        raise invalid(field, f"{field} is longer than {limit} characters.")
    if one_line and _NOT_ONE_LINE.search(value):
        raise invalid(field, f"{field} must be one line.")
    return value


def ref(value, field: str, *, limit: int = 254) -> str:
    """A name that looks something up (an e-mail, a prefix, a label, a search): one line
    of clean text, or a refusal; ``str()`` of a number is accepted."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return text(value, field, required=True, limit=limit, one_line=True)


def offset(value, field: str = "offset", *, maximum: int = 1_000_000) -> int:
    """A list offset from a query string: a whole number from 0 to ``maximum``."""
    if value in (None, ""):
        return 0
    raw = str(value).strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12 or int(raw) > maximum:
        raise invalid(field, f"{field} must be a whole number from 0 to {maximum}.")
    return int(raw)


def brief(value, limit: int = 60) -> str:
    """A value as a refusal may quote it: at most ``limit`` characters (a 900 KB value
    once came back whole in its error message)."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"
