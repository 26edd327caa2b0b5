"""Deadline pressure (SPEC §4): slaState, time remaining, and the priority floors."""

from __future__ import annotations

from datetime import datetime, timedelta

WARNING, BREACHING = 0.75, 0.90

# Rank scale (lower is more urgent). 0 exists only as the "above urgent" floor.
RANK_BREACHED, RANK_URGENT, RANK_HIGH, RANK_NONE = 0, 1, 2, 5
PRIORITY_RANK = {1: 1, 2: 2, 3: 3, 4: 4, 0: 5}
RANK_PRIORITY = {0: 1, 1: 1, 2: 2, 3: 3, 4: 4, 5: 0}  # rank shown as a priority
FLOOR = {"ok": RANK_NONE, "warning": RANK_HIGH, "breaching": RANK_URGENT, "breached": RANK_BREACHED}


def sla(created_at: datetime, due_at: datetime | None, now: datetime) -> tuple[str | None, int | None, datetime | None]:
    """Return (slaState, timeRemainingMs, when the state next changes) for a deadline."""
    if due_at is None:
        return None, None, None
    remaining_ms = int((due_at - now) / timedelta(milliseconds=1))
    if now >= due_at:
        return "breached", remaining_ms, None
    window = due_at - created_at
    if window <= timedelta(0):
        return "breaching", remaining_ms, due_at
    warning_at = created_at + window * WARNING
    breaching_at = created_at + window * BREACHING
    if now >= breaching_at:
        return "breaching", remaining_ms, due_at
    if now >= warning_at:
        return "warning", remaining_ms, breaching_at
    return "ok", remaining_ms, warning_at


def base_rank(*, priority: int, status: str, created_at, due_at, now) -> tuple[int, datetime | None]:
    """The issue's own rank before inheritance, and when it must next be recomputed."""
    rank = PRIORITY_RANK.get(priority, RANK_NONE)
    if status in ("done", "canceled"):
        return rank, None
    state, _, next_at = sla(created_at, due_at, now)
    if state:
        rank = min(rank, FLOOR[state])
    if status == "review":
        rank = min(rank, RANK_HIGH)
    return rank, next_at


def dispatch_rank(effective_rank: int, status: str) -> int:
    return effective_rank * 2 + (0 if status == "review" else 1)
