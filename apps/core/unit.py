"""The one place every service action passes through.

``with mutation(actor, "claim_issue") as unit:`` opens a transaction. The body changes
rows and calls ``unit.record(...)`` for each receipt; on the way out, before commit:

1. the org row is locked (last, and briefly: nothing else is locked after it), the
   receipt chain advances by the recorded entries and the action is charged to the
   ledger in the same locked update;
2. the transaction commits;
3. effective ranks of issues marked dirty are refreshed (own transaction, see
   apps.issues.ranking), then after-commit effects (live events, notifications) run.

Locking order, to rule out deadlocks: project claim lock or org rank lock -> issue rows
(NO KEY UPDATE; several at once in primary-key order) -> org row. The org row is only
ever taken here, at the end; nothing takes the org rank lock while holding an issue row.

``metered_read(actor, "get_issue")`` charges a read (plumbing tier) without a receipt.
"""

from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from apps.core import chain, sql
from apps.core.actor import Actor
from apps.core.errors import ServiceError

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    verb: str
    issue_id: object
    changes: dict
    identifier: str | None = None


@dataclass
class Unit:
    actor: Actor
    action: str
    entries: list[_Entry] = field(default_factory=list)
    dirty_ranks: set = field(default_factory=set)
    after: list = field(default_factory=list)
    charge: bool = True

    def record(self, verb: str, *, issue=None, changes: dict | None = None) -> None:
        identifier = issue.identifier if hasattr(issue, "identifier") else None
        self.entries.append(_Entry(verb, getattr(issue, "pk", issue), changes or {}, identifier))

    def rank_dirty(self, issue_id) -> None:
        self.dirty_ranks.add(issue_id)

    def on_commit(self, fn) -> None:
        """Run ``fn()`` after commit. Bind loop variables with functools.partial."""
        self.after.append(fn)


def _billable(actor: Actor) -> bool:
    # Agents are metered; humans in the browser and the system's own jobs are not.
    return actor.is_agent


def billing_precheck(actor: Actor, action: str) -> None:
    """Refuse early (unlocked read) when billing blocks this action; re-checked under lock."""
    from apps.billing import pricing

    if not settings.RETASC_BILLING_ENFORCE or not _billable(actor) or action in pricing.WIND_DOWN:
        return
    from apps.orgs.models import Org

    org = Org.objects.only("balance_micros", "monthly_cap_micros", "spend_month", "spend_month_micros").get(pk=actor.org.pk)
    _check_limits(org, action, pricing.price_of(pricing.tier_of(action)), timezone.now())


def _month(now) -> str:
    return now.strftime("%Y-%m")


def _check_limits(org, action: str, amount: int, now) -> None:
    if org.balance_micros < amount:
        raise ServiceError(
            "BILLING_INACTIVE",
            "The org's credit is used up; reads, heartbeat, checkpoint and release still work.",
            tell_human="Add credit to the org (Dash > Billing) to resume dispatch.",
        )
    spent = org.spend_month_micros if org.spend_month == _month(now) else 0
    if org.monthly_cap_micros is not None and spent + amount > org.monthly_cap_micros:
        raise ServiceError(
            "MONTHLY_CAP_REACHED",
            "The org's monthly spend cap is reached; reads, heartbeat, checkpoint and release still work.",
            tell_human="Raise the monthly cap (Dash > Billing) or wait for next month.",
        )


def _flush(unit: Unit) -> None:
    """Advance the chain and charge the ledger under the org row lock (see module doc)."""
    from apps.billing import pricing
    from apps.billing.models import LedgerEntry
    from apps.issues.models import Activity
    from apps.orgs.models import Org

    actor = unit.actor
    charging = unit.charge and _billable(actor)
    if not unit.entries and not charging:
        return
    now = timezone.now()
    # Locked read-modify-write of the org's counters: the lock is what makes it safe,
    # and the values must be read to chain the hashes anyway.
    # (Hand-written statements, apps.core.sql: this runs on every action.)
    counters = ("activity_seq", "chain_head", "balance_micros", "monthly_cap_micros", "spend_month", "spend_month_micros")
    row = sql.select_for_update(Org, actor.org.pk, list(counters))
    if row is None:
        raise Org.DoesNotExist(f"org {actor.org.pk} is gone")
    org = Org(pk=actor.org.pk, **dict(zip(counters, row, strict=True)))
    seq, head = org.activity_seq, org.chain_head
    rows = []
    for entry in unit.entries:
        seq += 1
        fields = {
            "org_id": org.pk,
            "seq": seq,
            "issue_id": entry.issue_id,
            "principal_id": actor.principal_id,
            "key_id": actor.key_id,
            "runtime": actor.runtime,
            "verb": entry.verb,
            "created_at": now,
        }
        row = Activity(**fields, prev_hash=head)
        row.changes = entry.changes
        row.hash = chain.link_hash(head, chain.canonical(**fields, changes_enc=row.changes_enc))
        head = row.hash
        rows.append(row)
    updates = {"activity_seq": seq, "chain_head": head}
    if charging:
        tier = pricing.tier_of(unit.action)
        amount = pricing.price_of(tier)
        enforce = settings.RETASC_BILLING_ENFORCE
        if enforce and unit.action not in pricing.WIND_DOWN and not unit.action.startswith("read:"):
            _check_limits(org, unit.action, amount, now)
        elif enforce:
            amount = max(0, min(amount, org.balance_micros))  # never below zero when enforcing
        month = _month(now)
        spent = (org.spend_month_micros if org.spend_month == month else 0) + amount
        balance = org.balance_micros - amount
        updates.update(balance_micros=balance, spend_month=month, spend_month_micros=spent)
        sql.insert(
            LedgerEntry,
            [
                {
                    "org_id": org.pk,
                    "key_id": actor.key_id,
                    "principal_id": actor.principal_id,
                    "action": unit.action.removeprefix("read:"),
                    "tier": tier,
                    "amount_micros": -amount,
                    "balance_after_micros": balance,
                    "note": "",
                    "created_at": now,
                }
            ],
        )
    sql.update(Org, org.pk, updates)
    sql.insert(Activity, [{name: getattr(row, name) for name in _ACTIVITY_COLUMNS} for row in rows])


_ACTIVITY_COLUMNS = (
    "org_id",
    "seq",
    "issue_id",
    "principal_id",
    "key_id",
    "runtime",
    "verb",
    "changes_enc",
    "created_at",
    "prev_hash",
    "hash",
)


@contextmanager
def mutation(actor: Actor, action: str, *, charge: bool = True):
    unit = Unit(actor=actor, action=action, charge=charge)
    if charge:
        billing_precheck(actor, action)
    with transaction.atomic():
        yield unit
        _flush(unit)
    _after_commit(unit)


def _after_commit(unit: Unit) -> None:
    if unit.dirty_ranks:
        from apps.issues.ranking import ranks_refresh

        try:
            ranks_refresh(org_id=unit.actor.org.pk, issue_ids=unit.dirty_ranks)
        except DatabaseError:
            # The action already committed: never report it as failed (a caller would
            # retry a create). The issues stay rank_dirty, so the next refresh (the next
            # pull's ranks_catch_up, or the periodic job) repairs their ranks.
            log.warning("rank refresh deferred after a database error", exc_info=True)
    if unit.entries:
        from apps.core import events

        # Live events carry no content (titles stay encrypted at rest and out of the
        # channel layer): the Dash re-reads what it shows.
        payload = [{"verb": e.verb, "issue": e.identifier, "runtime": unit.actor.runtime} for e in unit.entries]
        transaction.on_commit(functools.partial(events.publish, unit.actor.org.pk, payload))
    for fn in unit.after:
        # An effect must never fail the action that already committed.
        try:
            transaction.on_commit(fn)
        except Exception:  # pragma: no cover - defensive
            log.exception("after-commit effect failed")


def metered_read(actor: Actor, action: str) -> None:
    """Charge one read. Reads are never refused for billing."""
    if not _billable(actor):
        return
    with transaction.atomic():
        _flush(Unit(actor=actor, action=f"read:{action}"))
