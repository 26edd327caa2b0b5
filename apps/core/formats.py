"""Wire formats shared by every answer: timestamps as ISO 8601 in UTC with a ``Z``."""

from __future__ import annotations

from datetime import UTC


def iso(value):
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None
