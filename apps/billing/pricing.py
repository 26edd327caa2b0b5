"""Which tier each action is billed at (SPEC §11), and the current price of a tier."""

from __future__ import annotations

import threading
import time

from apps.billing.models import Price, Tier

DEFAULT_PRICES = {
    Tier.DISPATCH: 7000,
    Tier.WORK: 5000,
    Tier.BOOKKEEPING: 3000,
    Tier.PLUMBING: 1000,
    Tier.HEARTBEAT: 100,
}

# Actions by tier. Anything not named is plumbing (reads and small chores).
ACTION_TIERS = {
    "next_issue": Tier.DISPATCH,
    "next_batch_claim": Tier.DISPATCH,
    "claim_issue": Tier.DISPATCH,
    "add_relation": Tier.DISPATCH,
    "remove_relation": Tier.DISPATCH,
    "issue_create": Tier.WORK,
    "issue_body_edit": Tier.WORK,
    "checkpoint": Tier.WORK,
    "save_comment": Tier.WORK,
    "issue_edit": Tier.BOOKKEEPING,
    "save_label": Tier.BOOKKEEPING,
    "save_attachment": Tier.BOOKKEEPING,
    "obsolete_attachment": Tier.BOOKKEEPING,
    "retract_comment": Tier.BOOKKEEPING,
    "heartbeat": Tier.HEARTBEAT,
}

# Always allowed even when billing blocks, so that running work can wind down.
WIND_DOWN = {"heartbeat", "checkpoint", "release_issue"}

_cache: dict[str, int] = {}
_cache_at = 0.0
_lock = threading.Lock()


def tier_of(action: str) -> str:
    return ACTION_TIERS.get(action, Tier.PLUMBING)


def price_of(tier: str) -> int:
    """Price in micro-dollars; the table is re-read at most every 30 seconds."""
    global _cache_at
    now = time.monotonic()
    if now - _cache_at > 30 or tier not in _cache:
        with _lock:
            table = dict(DEFAULT_PRICES)
            table.update(dict(Price.objects.values_list("tier", "amount_micros")))
            _cache.clear()
            _cache.update(table)
            _cache_at = now
    return _cache[tier]


def invalidate() -> None:
    global _cache_at
    _cache_at = 0.0
