"""The answer shapes of SPEC §15, shared by MCP and the HTTP API (one serializer)."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from apps.core import sql
from apps.core.formats import iso
from apps.issues import handoff
from apps.issues.models import CLOSED, Claim, Issue, Label, Relation
from apps.issues.sla import RANK_PRIORITY, sla
from apps.orgs.actor import Actor
from apps.orgs.models import Project

User = get_user_model()


def issue_shapes(issues: list[Issue], *, actor: Actor | None, now=None) -> list[dict]:
    """Shape many issues with a fixed number of queries (relations, labels, holders)."""
    now = now or timezone.now()
    if not issues:
        return []
    ids = [i.pk for i in issues]
    blocked_by, blocks = defaultdict(list), defaultdict(list)
    wanted = set(ids)
    # Read with the issue row itself when the caller used ``shape_columns`` (one statement).
    read_along = all(_READ_ALONG in i.__dict__ for i in issues)
    edges = [e for i in issues for e in i.__dict__[_READ_ALONG][0]] if read_along else _edges(ids)
    for source_id, target_id, source_ident, source_status, target_ident in edges:
        if target_id in wanted:
            blocked_by[target_id].append((source_ident, source_status not in CLOSED))
        if source_id in wanted:
            blocks[source_id].append(target_ident)
    labels = defaultdict(list)
    for issue_id, name in [(i.pk, n) for i in issues for n in i.__dict__[_READ_ALONG][1]] if read_along else _labels(ids):
        labels[issue_id].append(name)
    emails = {}
    key = getattr(actor, "key", None)
    if key is not None and "user" in key._state.fields_cache:  # the caller's own e-mail is at hand
        emails[key.user_id] = key.user.email
    people_ids = {i.lease_principal_id for i in issues if i.lease_principal_id} - emails.keys()
    if people_ids:
        emails.update(User.objects.filter(pk__in=people_ids).values_list("pk", "email"))
    return [_shape(i, actor, now, blocked_by[i.pk], blocks[i.pk], labels[i.pk], emails) for i in issues]


# The two reads every shaped answer makes, written out once (apps.core.sql explains why):
# as ORM querysets they were most of the CPU of shaping an issue.


def _uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _edges(ids) -> list[tuple]:
    """``blocks`` edges into or out of ``ids``: (source, target, source identifier,
    source status, target identifier)."""
    marks, params = sql.marks(Issue, ids)
    issue_t, rel_t, project_t = Issue._meta.db_table, Relation._meta.db_table, Project._meta.db_table
    query = (
        f"SELECT r.source_id, r.target_id, sp.prefix, s.number, s.status, tp.prefix, t.number FROM {rel_t} r"
        f" JOIN {issue_t} s ON s.id = r.source_id JOIN {project_t} sp ON sp.id = s.project_id"
        f" JOIN {issue_t} t ON t.id = r.target_id JOIN {project_t} tp ON tp.id = t.project_id"
        f" WHERE r.type = 'blocks' AND (r.target_id IN ({marks}) OR r.source_id IN ({marks}))"
    )
    with connection.cursor() as cur:
        cur.execute(query, params + params)
        rows = cur.fetchall()
    return [(_uuid(src), _uuid(tgt), f"{sp}-{sn}", status, f"{tp}-{tn}") for src, tgt, sp, sn, status, tp, tn in rows]


_READ_ALONG = "_shape_edges_labels"


def shape_columns(alias: str) -> str | None:
    """Two extra columns for a statement that reads one issue as ``alias``: its ``blocks``
    edges and its label names, each aggregated to a JSON array, so that shaping it needs
    no further statement (``shape_columns_attach`` keeps them on the instance).
    PostgreSQL and SQLite (its JSON functions); None elsewhere: ``issue_shapes`` then
    reads them itself."""
    if connection.vendor == "postgresql":
        agg, array = "json_agg", "json_build_array"
    elif connection.vendor == "sqlite":
        agg, array = "json_group_array", "json_array"
    else:  # pragma: no cover - the two supported databases are above
        return None
    issue_t, rel_t, project_t = Issue._meta.db_table, Relation._meta.db_table, Project._meta.db_table
    through, label_t = Issue.labels.through._meta.db_table, Label._meta.db_table
    return (
        f"(SELECT {agg}({array}(r.source_id, r.target_id, sp.prefix, s.number, s.status, tp.prefix, t.number))"
        f" FROM {rel_t} r JOIN {issue_t} s ON s.id = r.source_id JOIN {project_t} sp ON sp.id = s.project_id"
        f" JOIN {issue_t} t ON t.id = r.target_id JOIN {project_t} tp ON tp.id = t.project_id"
        f" WHERE r.type = 'blocks' AND (r.target_id = {alias}.id OR r.source_id = {alias}.id)),"
        f" (SELECT {agg}(l.name) FROM {through} il JOIN {label_t} l ON l.id = il.label_id WHERE il.issue_id = {alias}.id)"
    )


def shape_columns_attach(issue: Issue, edges_json, labels_json) -> None:
    """Keep the two ``shape_columns`` values on ``issue`` for ``issue_shapes``."""
    edges = json.loads(edges_json) if isinstance(edges_json, str) else edges_json or []
    labels = json.loads(labels_json) if isinstance(labels_json, str) else labels_json or []
    issue.__dict__[_READ_ALONG] = (
        [(_uuid(src), _uuid(tgt), f"{sp}-{sn}", status, f"{tp}-{tn}") for src, tgt, sp, sn, status, tp, tn in edges],
        labels,
    )


def _labels(ids) -> list[tuple]:
    marks, params = sql.marks(Issue, ids)
    through = Issue.labels.through
    query = (
        f"SELECT il.issue_id, l.name FROM {through._meta.db_table} il JOIN {Label._meta.db_table} l ON l.id = il.label_id"
        f" WHERE il.issue_id IN ({marks})"
    )
    with connection.cursor() as cur:
        cur.execute(query, params)
        return [(_uuid(issue_id), name) for issue_id, name in cur.fetchall()]


def issue_shape(issue: Issue, *, actor: Actor | None, now=None) -> dict:
    return issue_shapes([issue], actor=actor, now=now)[0]


def _shape(issue: Issue, actor, now, blocked_by, blocks, labels, emails) -> dict:
    state, remaining, _ = sla(issue.created_at, issue.due_at, now)
    claim = None
    if issue.lease_claim_id and issue.lease_expires_at and issue.lease_expires_at > now:
        claim = {
            "heldBy": emails.get(issue.lease_principal_id),
            "expiresAt": iso(issue.lease_expires_at),
            "youHold": actor is not None and issue.lease_principal_id == actor.principal_id and _claim_key(issue) == actor.key_id,
        }
    checkpoint = issue.checkpoint
    return {
        "identifier": issue.identifier,
        "title": issue.title,
        "body": issue.body or "",
        "status": issue.status,
        "priority": issue.priority,
        "effectivePriority": RANK_PRIORITY[issue.effective_rank],
        "effectiveRank": issue.effective_rank,
        "work": issue.work,
        "assignee": issue.assignee.email if issue.assignee_id else None,
        "author": issue.author.email if issue.author_id else None,
        "labels": sorted(labels),
        "dueAt": iso(issue.due_at),
        "slaState": state,
        "timeRemainingMs": remaining,
        "blockedBy": sorted(ident for ident, _ in blocked_by),
        "blockedByOpen": sorted(ident for ident, is_open in blocked_by if is_open),
        "blocks": sorted(blocks),
        "acceptance": issue.acceptance or [],
        "evidence": issue.evidence or [],
        "checkpoint": handoff.text(checkpoint.note) if checkpoint else None,
        "handoff": handoff.fields(checkpoint.note) if checkpoint else None,
        "reclaimCount": issue.reclaim_count,
        "awaitingTriage": issue.awaiting_triage,
        "parent": issue.parent.identifier if issue.parent_id else None,
        "cancelReason": issue.cancel_reason,
        "source": issue.source,
        "createdAt": iso(issue.created_at),
        "updatedAt": iso(issue.updated_at),
        "closedAt": iso(issue.closed_at),
        "claim": claim,
    }


def _claim_key(issue: Issue):
    # The live claim's key, looked up once per shaped issue only when the caller's
    # principal holds it (rare in lists, always one row in claim answers).
    cached = issue.__dict__.get("_claim_key")
    if cached is None:
        cached = Claim.objects.filter(pk=issue.lease_claim_id).values_list("key_id", flat=True).first()
        issue.__dict__["_claim_key"] = cached
    return cached


def activity_shape(entry) -> dict:
    return {
        "seq": entry.seq,
        "verb": entry.verb,
        "at": iso(entry.created_at),
        "principal": entry.principal.email if entry.principal_id else None,
        "runtime": entry.runtime,
        "key": entry.key.prefix if entry.key_id else None,
        "changes": entry.changes,
        "hash": entry.hash,
    }


def comment_shape(comment) -> dict:
    return {
        "id": str(comment.id),
        "issue": comment.issue.identifier,
        "author": comment.author.email if comment.author_id else None,
        "runtime": comment.runtime,
        "body": comment.body,
        "createdAt": iso(comment.created_at),
        "retracted": comment.retracted_at is not None,
        "retractNote": comment.retract_note,
        "retractedAt": iso(comment.retracted_at),
    }


def attachment_shape(att) -> dict:
    return {
        "id": str(att.id),
        "issue": att.issue.identifier,
        "url": att.url,
        "title": att.title,
        "createdAt": iso(att.created_at),
        "obsolete": att.obsolete_at is not None,
        "obsoleteReason": att.obsolete_reason,
    }
