"""The answer shapes of SPEC §15, shared by MCP and the HTTP API (one serializer)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC

from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.core.actor import Actor
from apps.issues.models import CLOSED, Issue, Relation
from apps.issues.sla import RANK_PRIORITY, sla

User = get_user_model()


def iso(value):
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None


def issue_shapes(issues: list[Issue], *, actor: Actor | None, now=None) -> list[dict]:
    """Shape many issues with a fixed number of queries (relations, labels, holders)."""
    now = now or timezone.now()
    if not issues:
        return []
    ids = [i.pk for i in issues]
    blocked_by, blocks = defaultdict(list), defaultdict(list)
    rels = (
        Relation.objects.filter(type=Relation.Type.BLOCKS)
        .filter(target_id__in=ids)
        .select_related("source__project")
        .only("source_id", "target_id", "source__number", "source__status", "source__project__prefix")
    )
    for rel in rels:
        blocked_by[rel.target_id].append((rel.source.identifier, rel.source.status not in CLOSED))
    for rel in (
        Relation.objects.filter(type=Relation.Type.BLOCKS, source_id__in=ids)
        .select_related("target__project")
        .only("source_id", "target_id", "target__number", "target__project__prefix")
    ):
        blocks[rel.source_id].append(rel.target.identifier)
    labels = defaultdict(list)
    through = Issue.labels.through
    for issue_id, name in through.objects.filter(issue_id__in=ids).values_list("issue_id", "label__name"):
        labels[issue_id].append(name)
    people_ids = {i.lease_principal_id for i in issues if i.lease_principal_id}
    emails = dict(User.objects.filter(pk__in=people_ids).values_list("pk", "email")) if people_ids else {}
    return [_shape(i, actor, now, blocked_by[i.pk], blocks[i.pk], labels[i.pk], emails) for i in issues]


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
        "checkpoint": checkpoint.note if checkpoint else None,
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
    from apps.leases.models import Claim

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
