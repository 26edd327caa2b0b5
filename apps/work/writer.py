"""The unit of work's writer: what every mutation does on its way out.

``apps.core.unit.mutation`` opens the transaction and collects the receipts; this module,
installed at start-up, finishes the unit:

1. before commit, the org row is locked (last, and briefly: nothing else is locked after
   it); the receipt chain advances by the recorded entries, credits are added and the
   action is charged to the ledger, in the same locked update; just before, the
   notifications' outbox rows are written (apps.notifications.events). On PostgreSQL
   that is two statements: the locking read (carrying the unit's pending writes,
   ``Unit.write_with_flush``) and one write of the ledger rows, the receipts and the
   counters (carrying the unit's answer read, ``Unit.read_with_flush``);
2. the transaction commits;
3. effective ranks of issues marked dirty are refreshed (own transaction, see
   apps.issues.ranking), then after-commit effects (live events, notifications) run.

Locking order, to rule out deadlocks: project claim lock or org rank lock -> issue rows
(NO KEY UPDATE; several at once in primary-key order) -> org row. The org row is only
ever taken here, at the end; nothing takes the org rank lock while holding an issue row.

It sits above the models it writes (orgs' counters, issues' receipts, billing's ledger)
and the rank refresh it runs; nothing imports it but its app's ``ready()``.
"""

from __future__ import annotations

import functools
import logging

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from apps.billing import pricing
from apps.billing.blocks import billing_refusal
from apps.billing.models import LedgerEntry
from apps.core import chain, events, sql
from apps.core.unit import Unit
from apps.intake import writeback
from apps.issues.models import Activity
from apps.issues.ranking import ranks_refresh
from apps.notifications.events import outbox_write
from apps.orgs.actor import Actor
from apps.orgs.models import Org

log = logging.getLogger(__name__)

_COUNTERS = (
    "activity_seq",
    "chain_head",
    "chain_keyed",
    "balance_micros",
    "monthly_cap_micros",
    "spend_month",
    "spend_month_micros",
)
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


def _month(now) -> str:
    return now.strftime("%Y-%m")


def check_limits(org, action: str, amount: int, now) -> None:
    if org.balance_micros < amount:
        raise billing_refusal("BILLING_INACTIVE")
    spent = org.spend_month_micros if org.spend_month == _month(now) else 0
    if org.monthly_cap_micros is not None and spent + amount > org.monthly_cap_micros:
        raise billing_refusal("MONTHLY_CAP_REACHED")


class Writer:
    def billable(self, actor: Actor) -> bool:
        # Agents are metered; humans in the browser and the system's own jobs are not.
        return actor.is_agent

    def precheck(self, actor: Actor, action: str) -> None:
        if not settings.RETASC_BILLING_ENFORCE or not self.billable(actor) or action in pricing.WIND_DOWN:
            return
        org = Org.objects.only("balance_micros", "monthly_cap_micros", "spend_month", "spend_month_micros").get(pk=actor.org.pk)
        check_limits(org, action, pricing.price_of(pricing.tier_of(action)), timezone.now())

    def flush(self, unit: Unit) -> None:
        actor = unit.actor
        charging = unit.charge and self.billable(actor)
        if not unit.entries and not charging and not unit.credits:
            sql.run(unit.writes)
            unit.answer_row = sql.run([], read=unit.answer_query)  # it must see the writes
            return
        # The outbox rows of the action's notifications, in its transaction and before the
        # org row lock (kept brief). Free when no receipt names a notifiable event.
        outbox_write(unit)
        now = timezone.now()
        # Locked read-modify-write of the org's counters: the lock is what makes it safe,
        # and the values must be read to chain the hashes anyway.
        # (Hand-written statements, apps.core.sql: this runs on every action.)
        # The unit's pending writes (rows it has locked already) ride on this read.
        row = sql.select_for_update(Org, actor.org.pk, list(_COUNTERS), writes=unit.writes)
        if row is None:
            raise Org.DoesNotExist(f"org {actor.org.pk} is gone")
        org = Org(pk=actor.org.pk, **dict(zip(_COUNTERS, row, strict=True)))
        seq, head = org.activity_seq, org.chain_head
        # A chain not yet re-linked under the chain key (``relink_chains``) keeps its
        # unkeyed links until it is, so that the re-link can verify it whole first.
        if org.chain_keyed:
            link = functools.partial(chain.link_hash, chain.chain_key(org.pk))
        else:
            link = chain.legacy_link_hash
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
            activity = Activity(**fields, prev_hash=head)
            activity.changes = entry.changes
            activity.hash = link(head, chain.canonical(**fields, changes_enc=activity.changes_enc))
            head = activity.hash
            rows.append(activity)
        updates = {"activity_seq": seq, "chain_head": head}
        ledger = []
        balance = org.balance_micros
        for credit in unit.credits:
            balance += credit.amount_micros
            ledger.append(
                {
                    "org_id": org.pk,
                    "key_id": None,
                    "principal_id": credit.principal_id,
                    "action": credit.action,
                    "tier": "credit",  # credits of every kind share this tier: never spend
                    "amount_micros": credit.amount_micros,
                    "balance_after_micros": balance,
                    "note": credit.note[:200],
                    "created_at": now,
                }
            )
        if unit.credits:
            org.balance_micros = balance
            updates["balance_micros"] = balance
        if charging:
            tier = pricing.tier_of(unit.action)
            amount = pricing.price_of(tier)
            enforce = settings.RETASC_BILLING_ENFORCE
            if enforce and unit.action not in pricing.WIND_DOWN and not unit.action.startswith("read:"):
                check_limits(org, unit.action, amount, now)
            elif enforce:
                amount = max(0, min(amount, org.balance_micros))  # never below zero when enforcing
            month = _month(now)
            spent = (org.spend_month_micros if org.spend_month == month else 0) + amount
            balance = org.balance_micros - amount
            updates.update(balance_micros=balance, spend_month=month, spend_month_micros=spent)
            ledger.append(
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
            )
        if "balance_micros" in updates:
            unit.balance_after_micros = updates["balance_micros"]
        # The ledger rows, the receipts and the org's counters in one round trip (one
        # statement on PostgreSQL): the org row lock is held from here to commit.
        unit.answer_row = sql.write(
            [(LedgerEntry, ledger), (Activity, [{name: getattr(a, name) for name in _ACTIVITY_COLUMNS} for a in rows])],
            (Org, org.pk, updates),
            read=unit.answer_query,
        )
        if rows and org.chain_keyed:
            # The head's anchor outside the database (apps.core.chain), after commit.
            unit.after.append(functools.partial(_anchor, org.pk, seq, head))
        # Closing an issue synced from a connector writes its writeback job in this same
        # transaction (nothing lost while the worker is down); the job runs after commit.
        writeback.jobs_for_unit(unit)

    def after_commit(self, unit: Unit) -> None:
        if unit.dirty_ranks:
            try:
                ranks_refresh(org_id=unit.actor.org.pk, issue_ids=unit.dirty_ranks)
            except DatabaseError:
                # The action already committed: never report it as failed (a caller would
                # retry a create). The issues stay rank_dirty, so the next refresh (the next
                # pull's ranks_catch_up, or the periodic job) repairs their ranks.
                log.warning("rank refresh deferred after a database error", exc_info=True)
        if unit.entries:
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


def _anchor(org_id, seq: int, head: str) -> None:
    try:
        chain.write_anchor(org_id, seq, head)
    except OSError:
        # The action committed; the next one moves the head file forward.
        log.warning("could not write the chain head file of org %s", org_id, exc_info=True)


WRITER = Writer()
