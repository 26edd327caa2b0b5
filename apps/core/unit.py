"""The one place every service action passes through: the scaffold of the unit of work.

``with mutation(actor, "claim_issue") as unit:`` opens a transaction. The body changes
rows and calls ``unit.record(...)`` for each receipt (and ``unit.credit(...)`` for a
ledger credit); on the way out, before commit, the installed writer appends the
receipts to the org's chain and charges the ledger, under the org row lock, in the same
transaction; after commit it refreshes ranks and runs the after-commit effects.

The writer lives above the models it writes: ``apps.work.writer``, installed at start-up
by that app's ``ready()``. This scaffold stays here, below every domain, because every
domain service records receipts through it, the lowest (orgs) included. It knows no
domain: the actor is anything with ``org``, ``is_agent`` and the principal fields. With
no writer installed, a mutation refuses to run (receipts are never skipped silently).

``metered_read(actor, "get_issue")`` charges a read (plumbing tier) without a receipt.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction


@dataclass
class _Entry:
    verb: str
    issue_id: object
    changes: dict
    identifier: str | None = None
    # The row itself when one was given (notifications read its people without a query).
    subject: Any = None


@dataclass
class _Credit:
    amount_micros: int  # positive adds credit; negative (a correction, a refund) takes it back
    note: str
    principal_id: int | None = None
    action: str = "credit"


@dataclass
class Unit:
    actor: Any
    action: str
    entries: list[_Entry] = field(default_factory=list)
    dirty_ranks: set = field(default_factory=set)
    after: list = field(default_factory=list)
    credits: list[_Credit] = field(default_factory=list)
    charge: bool = True
    balance_after_micros: int | None = None  # set by the writer when it touched the balance
    # Round trips the writer saves (apps.core.sql.run): writes whose result nobody needs,
    # sent with its read of the org row, and one read sent with its last write.
    writes: list[tuple[str, list]] = field(default_factory=list)
    answer_query: tuple[str, list] | None = None
    answer_row: tuple | None = None

    def record(self, verb: str, *, issue=None, changes: dict | None = None) -> None:
        identifier = issue.identifier if hasattr(issue, "identifier") else None
        subject = issue if hasattr(issue, "pk") else None
        self.entries.append(_Entry(verb, getattr(issue, "pk", issue), changes or {}, identifier, subject))

    def credit(self, amount_micros: int, *, note: str, principal_id=None, action: str = "credit") -> None:
        """Add credit to the org's balance, in this transaction, with a ledger entry.

        ``action`` names the ledger row (``credit``, ``topup``, ``refund``,
        ``correction``). The amount is signed: a negative one is a debit that is not a
        charge (a staff correction, a card refund); it may take the balance below zero,
        which blocks dispatch like an empty balance does. It never counts as spend.
        """
        if isinstance(amount_micros, bool) or not isinstance(amount_micros, int) or amount_micros == 0:
            raise ValueError("a credit is a non-zero whole number of micro-dollars")
        self.credits.append(_Credit(amount_micros, note, principal_id, action))

    def rank_dirty(self, issue_id) -> None:
        self.dirty_ranks.add(issue_id)

    def write_with_flush(self, statement: str, params: list) -> None:
        """Send this write (INSERT/UPDATE/DELETE, no result wanted) in the same round trip
        as the writer's locking read of the org row, before it. Only for writes that keep
        the lock order (apps.work.writer): new rows, rows the transaction has locked
        already, rows nothing locks before the org row without holding them first."""
        self.writes.append((statement, params))

    def read_with_flush(self, statement: str, params: list) -> None:
        """Run this read (one row) in the same round trip as the writer's last write; the
        row lands in ``answer_row`` (None if the read was not run). It sees every earlier
        statement of the transaction, not the writer's own last writes (the receipts,
        the ledger, the org's counters)."""
        self.answer_query = (statement, params)

    def on_commit(self, fn) -> None:
        """Run ``fn()`` after commit. Bind loop variables with functools.partial."""
        self.after.append(fn)


class Writer(Protocol):
    def billable(self, actor) -> bool: ...

    def precheck(self, actor, action: str) -> None:
        """Refuse early (an unlocked read) when the action may not run; re-checked in flush."""

    def flush(self, unit: Unit) -> None:
        """Inside the transaction, last: append the receipts, charge and credit the ledger."""

    def after_commit(self, unit: Unit) -> None:
        """After commit: refresh ranks, publish live events, run the unit's effects."""


_writer: Writer | None = None


def install(writer: Writer) -> None:
    global _writer
    _writer = writer


def _installed() -> Writer:
    if _writer is None:
        raise ImproperlyConfigured("No unit-of-work writer is installed: apps.work must be in INSTALLED_APPS.")
    return _writer


@contextmanager
def mutation(actor, action: str, *, charge: bool = True):
    writer = _installed()
    unit = Unit(actor=actor, action=action, charge=charge)
    if charge:
        writer.precheck(actor, action)
    with transaction.atomic():
        yield unit
        writer.flush(unit)
    writer.after_commit(unit)


def metered_read(actor, action: str) -> None:
    """Charge one read. Reads are never refused for billing."""
    writer = _installed()
    if not writer.billable(actor):
        return
    with transaction.atomic():
        writer.flush(Unit(actor=actor, action=f"read:{action}"))
