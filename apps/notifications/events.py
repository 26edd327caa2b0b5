"""From an action's receipts to outbox rows, inside the action's transaction.

``outbox_write(unit)`` is called by the unit of work's writer before commit. It must
stay cheap on the hot path (claim, heartbeat, checkpoint): a unit whose receipts name no
notifiable event returns before touching the database. For an event, one statement finds
which of the tied humans (never the actor: principals are compared) have a live binding
and whether the org has a live webhook; rows are written only for them.

The events and their recipients (SPEC §10):

- done (finished, or a review approved) -> the author
- canceled -> the author, with the reason
- review requested -> the reviewer (the assignee), with the checkpoint
- assigned -> the new assignee
- SLA breaching -> the assignee, else the author (``sla_breaching_scan``, a periodic job)
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from apps.issues.models import OPEN, Issue
from apps.issues.selectors import sla_of
from apps.notifications.models import Binding, Kind, Outbox, Webhook

log = logging.getLogger(__name__)

_BY_VERB = {
    "finished": Kind.DONE,
    "review_approved": Kind.DONE,
    "canceled": Kind.CANCELED,
    "review_requested": Kind.REVIEW_REQUESTED,
}

# Woken after a commit that wrote outbox rows (the in-process worker waits on it).
_wakers: list = []


def on_outbox(fn) -> None:
    """Register ``fn()`` to run after a commit that wrote outbox rows (a worker's wake-up)."""
    _wakers.append(fn)


def _events(unit) -> list[tuple[str, Issue, int | None, dict]]:
    """(kind, issue, recipient, extra) for each notifiable receipt of the unit."""
    found = []
    for entry in unit.entries:
        issue = entry.subject
        if not isinstance(issue, Issue):
            continue
        kind = _BY_VERB.get(entry.verb)
        if kind == Kind.REVIEW_REQUESTED:
            found.append((kind, issue, issue.assignee_id, {}))
        elif kind is not None:
            extra = {"reason": issue.cancel_reason or ""} if kind == Kind.CANCELED else {}
            found.append((kind, issue, issue.author_id, extra))
        assignee = entry.changes.get("assignee")
        if assignee and assignee[1] is not None and assignee[1] != assignee[0]:
            found.append((Kind.ASSIGNED, issue, assignee[1], {}))
    return found


def _reachable(org_id, humans: set) -> tuple[set, bool]:
    """Which of ``humans`` have a live binding, and does the org have a live webhook: one statement."""
    binding, webhook = Binding._meta.db_table, Webhook._meta.db_table
    org = Binding._meta.get_field("org").target_field.get_db_prep_value(org_id, connection)
    marks = ", ".join(["%s"] * len(humans)) or "NULL"
    # Written out: it runs on every finish, cancel, review and assignment.
    query = (
        f"SELECT DISTINCT user_id FROM {binding} WHERE org_id = %s AND removed_at IS NULL AND user_id IN ({marks})"
        f" UNION ALL SELECT NULL FROM (SELECT 1 FROM {webhook} WHERE org_id = %s AND removed_at IS NULL LIMIT 1) w"
    )
    with connection.cursor() as cur:
        cur.execute(query, [org, *sorted(humans), org])
        rows = [r[0] for r in cur.fetchall()]
    return {r for r in rows if r is not None}, None in rows


def _payload(kind: str, issue: Issue, extra: dict) -> dict:
    payload = {"identifier": issue.identifier, "title": issue.title, "status": issue.status, **extra}
    if kind == Kind.REVIEW_REQUESTED and issue.checkpoint_id:
        payload["checkpoint"] = issue.checkpoint.note
    return payload


def outbox_write(unit) -> int:
    """Write the unit's outbox rows (called in its transaction). Answers how many."""
    events = _events(unit)
    if not events:
        return 0
    actor = unit.actor
    humans = {r for _, _, r, _ in events if r is not None and r != actor.principal_id}
    bound, webhooks = _reachable(actor.org.pk, humans)
    now = timezone.now()
    rows = []
    for kind, issue, recipient, extra in events:
        payload = None
        if recipient in bound and recipient != actor.principal_id:
            payload = _payload(kind, issue, extra)
            rows.append(_row(actor.org.pk, recipient, kind, issue.pk, payload, now))
        if webhooks:
            payload = payload or _payload(kind, issue, extra)
            rows.append(_row(actor.org.pk, None, kind, issue.pk, {**payload, "runtime": actor.runtime}, now))
    if rows:
        Outbox.objects.bulk_create(rows)
        _after_commit()
    return len(rows)


def _row(org_id, user_id, kind, issue_id, payload, now) -> Outbox:
    row = Outbox(org_id=org_id, user_id=user_id, kind=kind, issue_id=issue_id, created_at=now)
    row.payload = payload
    return row


def wake() -> None:
    """Wake the workers now (after a commit): the periodic run would find the rows anyway."""
    for fn in _wakers:
        try:
            fn()
        except Exception:  # a broker that is down must not fail the action: the rows wait in the database
            log.warning("could not wake the notification worker; the periodic run will send", exc_info=True)


def _after_commit() -> None:
    transaction.on_commit(wake)


# --- SLA breaching: no receipt marks it, so a periodic scan finds it -----------------


def sla_breaching_scan(*, now=None) -> int:
    """One ``sla_breaching`` outbox row per open issue that entered ``breaching`` or worse.

    Runs with the other periodic jobs. Idempotent: an issue is told once per deadline (the
    outbox row for its deadline is looked for first). The window is bounded so a scan
    looks only at deadlines due soon or just passed.
    """
    now = now or timezone.now()
    candidates = Issue.objects.filter(status__in=OPEN, due_at__isnull=False, due_at__lte=now + timedelta(days=30))
    # Only what a notice needs (the title is decrypted only for an issue that is breaching).
    candidates = (
        candidates.filter(due_at__gte=now - timedelta(days=1))
        .select_related("project")
        .only(
            "id", "org_id", "project__prefix", "number", "status", "created_at", "due_at", "assignee_id", "author_id", "title_enc"
        )
    )
    written = 0
    for issue in candidates:
        state, _ = sla_of(issue, now)
        if state not in ("breaching", "breached"):
            continue
        recipient = issue.assignee_id or issue.author_id
        if recipient is None:
            continue
        marker = issue.due_at.isoformat()
        with transaction.atomic():
            seen = Outbox.objects.filter(issue_id=issue.pk, kind=Kind.SLA_BREACHING, created_at__gte=issue.created_at)
            if any((row.payload or {}).get("due") == marker for row in seen):
                continue
            bound, webhooks = _reachable(issue.org_id, {recipient})
            payload = {"identifier": issue.identifier, "title": issue.title, "status": issue.status, "due": marker}
            rows = []
            if recipient in bound:
                rows.append(_row(issue.org_id, recipient, Kind.SLA_BREACHING, issue.pk, payload, now))
            if webhooks or not rows:
                # A webhook row, or a silent marker so the scan does not look again.
                rows.append(_row(issue.org_id, None, Kind.SLA_BREACHING, issue.pk, payload, now))
            Outbox.objects.bulk_create(rows)
            _after_commit()
            written += 1
    return written
