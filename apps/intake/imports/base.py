"""What an adapter hands the importer: batches of normalized records, each with the
checkpoint to store once it has committed (where a resumed run starts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime

BATCH = 200  # issues per transaction (bench/import_speed.py measures the choice)


@dataclass
class Batch:
    people: list = field(default_factory=list)
    projects: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    issues: list = field(default_factory=list)
    relations: list = field(default_factory=list)
    parents: list = field(default_factory=list)  # (child ext id, parent ext id)
    checkpoint: dict = field(default_factory=dict)
    total: int | None = None
    warnings: list = field(default_factory=list)  # (record, message): listed in the job's errors


def when(value) -> datetime | None:
    """An ISO 8601 time from a source (``Z`` accepted), or None when absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = parse_datetime(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed
