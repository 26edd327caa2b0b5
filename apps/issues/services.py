"""Issue writes: create, edit, status transitions, relations, comments, labels, attachments.

Every function takes keyword-only arguments, runs inside ``apps.core.unit.mutation``
(one receipt per change, metering, rank refresh after commit), and validates all input
before writing anything, so a refusal leaves the database as it was.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.core import keystore, sql
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.formats import iso
from apps.core.unit import metered_read, mutation
from apps.issues import acceptance as acceptance_rules
from apps.issues import inputs
from apps.issues.fencing import claim_by_token, claim_fence, is_live, token_hash
from apps.issues.models import CLOSED, Attachment, Checkpoint, Claim, Comment, Issue, Label, Relation, Status
from apps.issues.ranking import ancestors, lock_org_ranks, own_ranks
from apps.issues.search import search_reindex
from apps.issues.selectors import active_member, issue_resolve, issue_with_people, issue_with_people_query, project_resolve
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Membership, Org, Project
from apps.orgs.selectors import human_resolve
from apps.orgs.services import owner_only

UNSET = object()


# --- helpers --------------------------------------------------------------------------


def _labels(*, actor: Actor, names) -> list[Label]:
    names = inputs.string_list(names, "labels", item_limit=60)
    found = []
    for name in dict.fromkeys(names):
        label, _ = Label.objects.get_or_create(org_id=actor.org.pk, name=name)
        found.append(label)
    return found


def _blockers(*, actor: Actor, identifiers) -> list[Issue]:
    idents = inputs.string_list(identifiers, "blockedBy", item_limit=30)
    out = []
    for ident in dict.fromkeys(idents):
        try:
            out.append(issue_resolve(actor=actor, identifier=ident))
        except ServiceError:
            raise invalid("blockedBy", f"blockedBy names {inputs.brief(ident)}, which does not exist.") from None
    return out


def _parent(*, actor: Actor, ref, child: Issue | None = None) -> Issue | None:
    if ref is None or ref == "" or (isinstance(ref, str) and ref.lower() == "none"):
        return None
    try:
        parent = issue_resolve(actor=actor, identifier=ref)
    except ServiceError:
        raise invalid("parent", f"parent names {inputs.brief(ref)}, which does not exist.") from None
    if parent.work:
        raise invalid("parent", f"{parent.identifier} is a work item; a parent must be a container (work:false).")
    seen, node = set(), parent
    while node is not None:
        if child is not None and node.pk == child.pk:
            raise ServiceError("CYCLE", f"{parent.identifier} is inside {child.identifier}; parents cannot loop.")
        if node.pk in seen:
            break
        seen.add(node.pk)
        node = node.parent
    return parent


def _would_cycle(*, source: Issue, target: Issue) -> bool:
    """Adding source-blocks->target closes a cycle iff target already blocks source."""
    return target.pk in ancestors([source.pk])


def _edge_blocks(*, actor: Actor, source: Issue, target: Issue, unit) -> bool:
    """Add a blocks edge (idempotent). The org rank lock is held by the caller."""
    if source.pk == target.pk:
        raise ServiceError("CYCLE", f"{source.identifier} cannot block itself.")
    if Relation.objects.filter(source=source, target=target, type=Relation.Type.BLOCKS).exists():
        return False
    if _would_cycle(source=source, target=target):
        raise ServiceError(
            "CYCLE",
            f"{source.identifier} blocks {target.identifier} would close a cycle: "
            f"{target.identifier} already blocks {source.identifier}.",
        )
    Relation.objects.create(org_id=actor.org.pk, source=source, target=target, type=Relation.Type.BLOCKS)
    unit.rank_dirty(source.pk)
    return True


def _value(issue: Issue, field: str):
    """A field's value as receipts store it (plaintext, JSON-friendly)."""
    if field == "assignee":
        return issue.assignee_id
    if field == "parent":
        return issue.parent.identifier if issue.parent_id else None
    if field == "dueAt":
        return issue.due_at.isoformat() if issue.due_at else None
    if field == "checkpoint":
        return issue.checkpoint.note if issue.checkpoint_id else None
    return getattr(issue, _ATTR[field])


_ATTR = {
    "title": "title",
    "body": "body",
    "status": "status",
    "priority": "priority",
    "work": "work",
    "acceptance": "acceptance",
    "evidence": "evidence",
    "cancelReason": "cancel_reason",
    "awaitingTriage": "awaiting_triage",
    "reclaimCount": "reclaim_count",
    "noDependency": "no_dependency",
}
FOLDED_FIELDS = (
    "title",
    "body",
    "status",
    "priority",
    "work",
    "dueAt",
    "assignee",
    "labels",
    "acceptance",
    "evidence",
    "cancelReason",
    "parent",
    "awaitingTriage",
    "checkpoint",
    "reclaimCount",
)


def state_for_fold(issue: Issue) -> dict:
    """The row's current state in receipt terms; folding its receipts must give the same."""
    state = {f: _value(issue, f) for f in FOLDED_FIELDS if f != "labels"}
    state["labels"] = sorted(issue.labels.values_list("name", flat=True))
    return state


def fold(entries) -> dict:
    """Rebuild an issue's state by applying each receipt's ``after`` values in order."""
    state: dict = {}
    for entry in entries:
        for field, change in (entry.changes or {}).items():
            if field in FOLDED_FIELDS and isinstance(change, list) and len(change) == 2:
                state[field] = change[1]
    return state


# --- create ---------------------------------------------------------------------------


def issue_create(
    *,
    actor: Actor,
    title,
    work,
    body=None,
    blocked_by=None,
    no_dependency=None,
    status=None,
    assignee=None,
    priority=None,
    due_at=None,
    labels=None,
    acceptance=None,
    parent=None,
    project: str | None = None,
    awaiting_triage: bool = False,
    source: str = "agent",
    source_ref: str = "",
    on_created=None,
) -> Issue:
    """Create an issue. ``blockedBy`` or ``noDependency`` is required (SPEC §3).

    ``on_created(issue)`` runs inside the creating transaction: intake links the upstream
    issue there, so a concurrent duplicate rolls the whole creation back."""
    title = inputs.text(title, "title", required=True, limit=inputs.MAX_TITLE, one_line=True)
    if work is None:
        raise invalid("work", "work is required: true for a unit an agent executes, false for a container.")
    work = inputs.boolean(work, "work")
    body = inputs.text(body, "body")
    if blocked_by in (None, []) and not (isinstance(no_dependency, str) and no_dependency.strip()):
        raise invalid("blockedBy", "Say what this depends on: blockedBy (identifiers) or noDependency (a one-line reason).")
    no_dependency = inputs.text(no_dependency, "noDependency", limit=300, one_line=True)
    status = status or Status.TODO
    if status not in (Status.TODO, Status.BLOCKED):
        raise invalid("status", "A new issue starts as todo (or blocked for an external wait).")
    priority = inputs.priority(priority if priority is not None else 0)
    due = inputs.due(due_at, org_timezone=actor.org.timezone)
    acceptance = acceptance_rules.parse(acceptance)
    assignee_id = human_resolve(actor=actor, ref=assignee, field="assignee", allow_none=True)
    target_project: Project = project_resolve(actor=actor, prefix=project)

    with mutation(actor, "issue_create") as unit:
        blockers = _blockers(actor=actor, identifiers=blocked_by) if blocked_by else []
        parent_issue = _parent(actor=actor, ref=parent)
        label_rows = _labels(actor=actor, names=labels) if labels else []
        if blockers:
            lock_org_ranks(actor.org.pk)
        # The project row lock orders concurrent creations: numbers have no gaps or dupes.
        Project.objects.filter(pk=target_project.pk).update(issue_seq=F("issue_seq") + 1)
        number = Project.objects.values_list("issue_seq", flat=True).get(pk=target_project.pk)
        now = timezone.now()
        issue = Issue(
            org_id=actor.org.pk,
            project=target_project,
            number=number,
            work=work,
            status=status,
            priority=priority,
            due_at=due,
            assignee_id=assignee_id,
            author_id=actor.principal_id,
            author_key=actor.key,
            parent=parent_issue,
            awaiting_triage=awaiting_triage,
            source=source,
            source_ref=source_ref[:255],
            created_at=now,
            updated_at=now,
            rank_dirty=True,
        )
        issue.title = title
        issue.body = body
        issue.acceptance = acceptance or None
        issue.no_dependency = no_dependency
        issue.save(force_insert=True)
        search_reindex(issue)
        if label_rows:
            issue.labels.set(label_rows)
        for blocker in blockers:
            _edge_blocks(actor=actor, source=blocker, target=issue, unit=unit)
        unit.rank_dirty(issue.pk)
        changes = {f: [None, _value(issue, f)] for f in FOLDED_FIELDS if f not in ("labels", "checkpoint")}
        changes["labels"] = [None, sorted(label.name for label in label_rows)]
        changes["blockedBy"] = [None, [b.identifier for b in blockers]]
        if no_dependency:
            changes["noDependency"] = [None, no_dependency]
        unit.record("created", issue=issue, changes=changes)
        if on_created is not None:
            on_created(issue)
    issue.project = target_project
    return issue


# --- update ---------------------------------------------------------------------------


def issue_update(
    *,
    actor: Actor,
    identifier: str,
    claim_token: str | None = None,
    title=UNSET,
    body=UNSET,
    work=UNSET,
    blocked_by=UNSET,
    no_dependency=UNSET,
    status=UNSET,
    assignee=UNSET,
    priority=UNSET,
    due_at=UNSET,
    labels=UNSET,
    labels_add=UNSET,
    labels_remove=UNSET,
    acceptance=UNSET,
    evidence=UNSET,
    cancel_reason=UNSET,
    parent=UNSET,
    awaiting_triage=UNSET,
    unfenced: bool = False,
    receipt_verb: str | None = None,
    read_back: bool = False,
) -> Issue:
    """Edit fields and/or move status. Writes to a held issue need its claim token.

    ``unfenced``: the system writing what happened at the issue's source (an upstream
    edit, close or merge through a connector); the source is the truth, so a live claim
    does not fence it (a close still ends the claim). Only a system actor may pass it.
    ``receipt_verb`` names the receipt instead of the default (a triage sign-off).
    ``labels`` replaces the issue's labels; ``labels_add`` / ``labels_remove`` change them
    relative to what the issue has, read under the issue's lock (not with ``labels``).
    ``read_back``: the caller answers with the issue as committed; when no rank refresh
    follows the commit, it is read with the last statement before it (no round trip of
    its own) and kept as ``issue.read_back`` (absent otherwise: read it after).
    """
    if unfenced and (actor.principal_id is not None or actor.key is not None):
        raise ServiceError("FORBIDDEN", "Only the system writes past a claim.")
    parsed: dict = {}
    if labels is not UNSET and (labels_add is not UNSET or labels_remove is not UNSET):
        raise invalid("labels", "Give the labels, or labels to add and remove, not both.")
    if labels_add is not UNSET:
        parsed["labelsAdd"] = inputs.string_list(labels_add, "labelsAdd", item_limit=60)
    if labels_remove is not UNSET:
        parsed["labelsRemove"] = inputs.string_list(labels_remove, "labelsRemove", item_limit=60)
    if title is not UNSET:
        parsed["title"] = inputs.text(title, "title", required=True, limit=inputs.MAX_TITLE, one_line=True)
    if body is not UNSET:
        parsed["body"] = inputs.text(body, "body")
    if work is not UNSET:
        parsed["work"] = inputs.boolean(work, "work")
    if priority is not UNSET:
        parsed["priority"] = inputs.priority(priority)
    if due_at is not UNSET:
        parsed["dueAt"] = inputs.due(due_at, org_timezone=actor.org.timezone)
    if assignee is not UNSET:
        parsed["assignee"] = human_resolve(actor=actor, ref=assignee, field="assignee", allow_none=True)
    if acceptance is not UNSET:
        parsed["acceptance"] = acceptance_rules.parse(acceptance) or None
    if cancel_reason is not UNSET:
        parsed["cancelReason"] = inputs.text(cancel_reason, "cancelReason", limit=2000)
    if no_dependency is not UNSET:
        parsed["noDependency"] = inputs.text(no_dependency, "noDependency", limit=300, one_line=True)
    if awaiting_triage is not UNSET:
        parsed["awaitingTriage"] = inputs.boolean(awaiting_triage, "awaitingTriage")
    if status is not UNSET and status not in Status.values:
        raise invalid("status", f"Unknown status {inputs.brief(status)!r}; use one of {', '.join(Status.values)}.")
    action = "issue_body_edit" if "body" in parsed else "issue_edit"

    with mutation(actor, action) as unit:
        if blocked_by is not UNSET and blocked_by:
            # The org rank lock before the issue row, never after: ranks_refresh holds that
            # lock while it updates issue rows, so taking it with this row already locked
            # deadlocked against a concurrent refresh (tests/core/test_race_chain.py).
            lock_org_ranks(actor.org.pk)
        issue = issue_resolve(actor=actor, identifier=identifier, lock=True)
        now = timezone.now()
        repeat = _finished_with(issue=issue, actor=actor, token=claim_token, status=status)
        # A holder repeating its own finish (a retry after a lost answer) is answered with
        # the finished issue, not CLAIM_LOST; its claim is over, so it writes as no holder.
        fenced = not (repeat or unfenced)
        claim = claim_fence(issue=issue, actor=actor, token=claim_token, now=now, required=False) if fenced else None
        diff: dict = {}
        update_fields: set = set()

        def put(field: str, attr: str, value):
            before = _value(issue, field)
            setattr(issue, attr, value)
            after = _value(issue, field)
            if before != after:
                diff[field] = [before, after]
                update_fields.add(attr if not attr.endswith("_id") else attr)

        for field, attr in (
            ("title", "title"),
            ("body", "body"),
            ("work", "work"),
            ("priority", "priority"),
            ("acceptance", "acceptance"),
            ("cancelReason", "cancel_reason"),
            ("noDependency", "no_dependency"),
            ("awaitingTriage", "awaiting_triage"),
        ):
            if field in parsed:
                put(field, attr, parsed[field])
        if diff.get("awaitingTriage") == [True, False] and actor.is_agent:
            # Quarantine of external intake ends only by a human's sign-off (SPEC §3).
            raise ServiceError(
                "FORBIDDEN",
                "Only a person can sign off an issue awaiting triage.",
                tell_human=f"Triage {issue.identifier} in the Dash.",
            )
        if "dueAt" in parsed:
            put("dueAt", "due_at", parsed["dueAt"])
        if "assignee" in parsed:
            put("assignee", "assignee_id", parsed["assignee"])
        if parent is not UNSET:
            put("parent", "parent", _parent(actor=actor, ref=parent, child=issue))
        if "work" in diff and not issue.work and is_live(issue, now):
            raise invalid("work", "Release the claim before turning the issue into a container.")
        if evidence is not UNSET:
            criteria = len(issue.acceptance or [])
            if criteria == 0:
                raise invalid("evidence", "This issue has no acceptance criteria to give evidence for.")
            put("evidence", "evidence", inputs.evidence(evidence, criteria))
        if "labelsAdd" in parsed or "labelsRemove" in parsed:
            names = dict.fromkeys(issue.labels.values_list("name", flat=True))  # under the issue lock
            names.update(dict.fromkeys(parsed.get("labelsAdd", [])))
            for name in parsed.get("labelsRemove", []):
                names.pop(name, None)
            labels = list(names)
        if labels is not UNSET:
            new_labels = _labels(actor=actor, names=labels)
            before = sorted(issue.labels.values_list("name", flat=True))
            after = sorted(label.name for label in new_labels)
            if before != after:
                issue.labels.set(new_labels)
                diff["labels"] = [before, after]
        if blocked_by is not UNSET and blocked_by:
            added = [
                b.identifier
                for b in _blockers(actor=actor, identifiers=blocked_by)
                if _edge_blocks(actor=actor, source=b, target=issue, unit=unit)
            ]
            if added:
                diff["blockedBy+"] = [None, added]
        verb = "updated"
        if status is not UNSET and status != issue.status:
            verb = _transition(issue=issue, new=status, actor=actor, claim=claim, now=now, diff=diff, unit=unit)
            update_fields.update(
                {
                    "status",
                    "closed_at",
                    "checkpoint",
                    "submitted_by",
                    "review_requested_at",
                    "lease_claim_id",
                    "lease_principal_id",
                    "lease_expires_at",
                    "cancel_reason_enc",
                }
            )
        ranks = None
        if {"priority", "dueAt", "status"} & diff.keys():
            # Closing an issue in no blocks edge: its ranks go in this UPDATE, and no
            # refresh transaction follows the commit (apps.issues.ranking.own_ranks).
            ranks = own_ranks(issue, now) if blocked_by is UNSET or not blocked_by else None
            if ranks is None:
                unit.rank_dirty(issue.pk)
            else:
                unit.dirty_ranks.discard(issue.pk)
                for name, value in ranks.items():
                    setattr(issue, name, value)
                update_fields.update(ranks)
        if not diff:
            if repeat:
                unit.charge = False  # the retry of an action already charged
            return issue
        issue.updated_at = now
        update_fields = {_column(f) for f in update_fields} | {"updated_at"}
        _save(issue, sorted(update_fields), unit)
        if {"title", "body"} & diff.keys():
            search_reindex(issue)
        unit.record(receipt_verb or verb, issue=issue, changes=diff)
        if read_back and not unit.dirty_ranks:
            unit.read_with_flush(*issue_with_people_query(issue.pk))
    if unit.answer_row is not None:
        issue.read_back = issue_with_people(issue.pk, row=unit.answer_row)
    return issue


def issue_triage(*, actor: Actor, identifier: str, accept, reason=None) -> Issue:
    """A person signs off an issue awaiting triage (SPEC §9): accept lets it be
    dispatched; reject cancels it with the reason. Agent keys are refused (FORBIDDEN).
    The sign-off is one receipt, ``triage_accepted`` or ``triage_rejected``."""
    if actor.is_agent or actor.principal_id is None:
        raise ServiceError(
            "FORBIDDEN",
            "Only a person can sign off an issue awaiting triage.",
            tell_human=f"Triage {identifier} in the Dash.",
        )
    accept = inputs.boolean(accept, "accept")
    reason = inputs.text(reason, "reason", limit=2000)
    if not accept and not reason:
        raise invalid("reason", "Say why with a reason when rejecting.")
    issue = issue_resolve(actor=actor, identifier=identifier)
    if not issue.awaiting_triage:
        raise ServiceError("CONFLICT", f"{issue.identifier} is not awaiting triage.")
    if accept:
        return issue_update(actor=actor, identifier=identifier, awaiting_triage=False, receipt_verb="triage_accepted")
    return issue_update(
        actor=actor,
        identifier=identifier,
        awaiting_triage=False,
        status=Status.CANCELED,
        cancel_reason=reason,
        receipt_verb="triage_rejected",
    )


def issue_bulk_update(
    *,
    actor: Actor,
    identifiers,
    status=UNSET,
    priority=UNSET,
    assignee=UNSET,
    labels_add=UNSET,
    labels_remove=UNSET,
) -> list[dict]:
    """Apply one change to several issues: each through ``issue_update`` in its own unit
    of work (one receipt per changed issue). A refusal of one issue is reported in its
    entry and does not stop the others. Returns ``[{identifier, ok, error}]`` in order.

    The request itself is refused whole (nothing written) when it names no issue, more
    than ``inputs.MAX_ITEMS`` (50), no change, or a bad status or priority.
    """
    idents = list(dict.fromkeys(i.upper() for i in inputs.string_list(identifiers, "identifiers", item_limit=40)))
    if not idents:
        raise invalid("identifiers", "Select at least one issue.")
    changes = {
        name: value
        for name, value in (
            ("status", status),
            ("priority", priority),
            ("assignee", assignee),
            ("labels_add", labels_add),
            ("labels_remove", labels_remove),
        )
        if value is not UNSET
    }
    if not changes:
        raise invalid("changes", "Choose a change to apply: status, priority, labels or lane.")
    # The change itself is checked once, up front: a bad value refuses the whole request.
    if "priority" in changes:
        inputs.priority(changes["priority"])
    if "status" in changes and changes["status"] not in Status.values:
        raise invalid("status", f"Unknown status {changes['status']!r}; use one of {', '.join(Status.values)}.")
    results = []
    for identifier in idents:
        try:
            issue = issue_update(actor=actor, identifier=identifier, **changes)
        except ServiceError as exc:
            results.append({"identifier": identifier, "ok": False, "error": exc})
        else:
            results.append({"identifier": issue.identifier, "ok": True, "error": None})
    return results


def _column(attr: str) -> str:
    sealed = {"title", "body", "acceptance", "evidence", "cancel_reason", "no_dependency"}
    return f"{attr}_enc" if attr in sealed else attr


def _require_evidence(issue: Issue) -> None:
    acceptance_rules.require_evidence(identifier=issue.identifier, criteria=issue.acceptance or [], evidence=issue.evidence or [])


def author_cannot_review(identifier: str) -> ServiceError:
    return ServiceError(
        "AUTHOR_CANNOT_REVIEW",
        f"You submitted {identifier}; another person must review it.",
        tell_human=f"{identifier} needs a review by a person other than its author: ask a teammate to review it.",
        ask_human=f"Who else can review {identifier}?",
    )


def _require_reviewer(issue: Issue, actor: Actor, claim) -> None:
    if actor.principal_id is not None and actor.principal_id == issue.submitted_by_id:
        raise author_cannot_review(issue.identifier)
    if actor.is_agent and (claim is None or claim.kind != "review"):
        raise ServiceError("CLAIM_REQUIRED", f"Claim the review of {issue.identifier} first (claim_issue).")


def _finished_with(*, issue: Issue, actor: Actor, token, status) -> bool:
    """Did this principal's claim ``token`` itself close ``issue`` into ``status``?"""
    if not token or status is UNSET or status not in CLOSED or issue.status != status or issue.closed_at is None:
        return False
    claim = claim_by_token(token_hash(str(token)), issue.pk)
    return (
        claim is not None
        and claim.principal_id == actor.principal_id
        and claim.end_reason == Claim.End.FINISHED
        and claim.ended_at == issue.closed_at
    )


def _end_claim(issue: Issue, claim_id, reason: str, now) -> None:
    """End the issue's claim. The claim row is written with the issue's own UPDATE at the
    end of ``issue_update`` (``_save``: one round trip on PostgreSQL)."""
    if claim_id:
        issue.__dict__["_claim_end"] = (claim_id, reason, now)
    issue.lease_claim_id = issue.lease_principal_id = issue.lease_expires_at = None


def _save(issue: Issue, names, unit) -> None:
    """``issue.save(update_fields=names)`` and the claim end ``_end_claim`` left pending,
    written out (apps.core.sql): every finish runs it. They are sent with the writer's
    read of the org row, no round trip of their own: the issue row is locked already
    (``issue_resolve(lock=True)``), and the claim row is the issue's (every other write
    to a claim row that goes on to the org row holds the issue row first, or waits for
    it before that)."""
    fields = [Issue._meta.get_field(name) for name in names]
    parts = [sql.update_statement(Issue, issue.pk, {f.attname: getattr(issue, f.attname) for f in fields})]
    ended = issue.__dict__.pop("_claim_end", None)
    if ended is not None:
        claim_id, reason, now = ended
        parts.insert(
            0,
            (
                f"UPDATE {Claim._meta.db_table} SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL",
                [Claim._meta.get_field("ended_at").get_db_prep_save(now, connection), reason, claim_id],
            ),
        )
    for part in parts:
        unit.write_with_flush(*part)


def _transition(*, issue: Issue, new: str, actor: Actor, claim, now, diff: dict, unit) -> str:
    """Apply one status change (SPEC §3). Returns the receipt's verb."""
    old = issue.status
    held_id = issue.lease_claim_id
    verb = "status_changed"
    if new == Status.DONE:
        if old == Status.REVIEW:
            _require_reviewer(issue, actor, claim)
            verb = "review_approved"
        else:
            if actor.is_agent and claim is None:
                raise ServiceError("CLAIM_REQUIRED", f"Claim {issue.identifier} first; finishing needs your live claim.")
            verb = "finished"
        _require_evidence(issue)
        _end_claim(issue, held_id, "finished", now)
    elif new == Status.CANCELED:
        if not issue.cancel_reason:
            raise invalid("cancelReason", "Canceling needs a cancelReason.")
        _end_claim(issue, held_id, "finished", now)
        verb = "canceled"
    elif new == Status.REVIEW:
        if actor.is_agent and claim is None:
            raise ServiceError("CLAIM_REQUIRED", f"Claim {issue.identifier} first; only its holder submits it for review.")
        if (
            issue.assignee_id is None
            or issue.assignee_id == actor.principal_id
            or not active_member(org_id=issue.org_id, user_id=issue.assignee_id)
        ):
            raise ServiceError(
                "REVIEWER_REQUIRED",
                "Review needs an assignee who is an active person other than you.",
                tell_human=f"Assign a reviewer to {issue.identifier}.",
                ask_human=f"Who should review {issue.identifier}? It needs an active person other than me as its assignee.",
            )
        if issue.checkpoint_id is None:
            raise ServiceError("HANDOFF_REQUIRED", "Write a checkpoint (handoff note for the reviewer) first.")
        _require_evidence(issue)
        _end_claim(issue, held_id, "submitted", now)
        issue.submitted_by_id = actor.principal_id
        issue.review_requested_at = now
        verb = "review_requested"
    elif old == Status.REVIEW:
        if new != Status.TODO:
            raise invalid("status", "A review ends in done (approve) or todo (send back).")
        _require_reviewer(issue, actor, claim)
        if not Comment.objects.filter(
            issue=issue, author_id=actor.principal_id, created_at__gte=issue.review_requested_at, retracted_at__isnull=True
        ).exists():
            raise ServiceError("REVIEW_COMMENT_REQUIRED", "Say why with a comment (save_comment) before sending it back.")
        _end_claim(issue, held_id, "released", now)
        issue.submitted_by_id = None
        issue.review_requested_at = None
        verb = "review_sent_back"
    elif old in CLOSED:
        verb = "reopened"
    issue.status = new
    diff["status"] = [old, new]
    if new in CLOSED:
        issue.closed_at = now
        if issue.checkpoint_id:
            diff["checkpoint"] = [issue.checkpoint.note, None]
            issue.checkpoint = None
    elif old in CLOSED:
        issue.closed_at = None
        if issue.cancel_reason:
            diff["cancelReason"] = [issue.cancel_reason, None]
            issue.cancel_reason = None
    if held_id and issue.lease_claim_id is None:
        diff["claim"] = ["held", None]
    unit.rank_dirty(issue.pk)
    return verb


# --- relations ------------------------------------------------------------------------

RELATION_TYPES = ("blocks", "blocked_by", "related", "duplicate")


def _relation_ends(*, actor: Actor, source_id: str, target_id: str, type: str):
    if type not in RELATION_TYPES:
        raise invalid("type", f"type is one of {', '.join(RELATION_TYPES)}.")
    source = issue_resolve(actor=actor, identifier=source_id)
    target = issue_resolve(actor=actor, identifier=target_id)
    if type == "blocked_by":
        source, target, type = target, source, "blocks"
    return source, target, type


def relation_add(*, actor: Actor, source_id: str, target_id: str, type: str) -> dict:
    with mutation(actor, "add_relation") as unit:
        source, target, kind = _relation_ends(actor=actor, source_id=source_id, target_id=target_id, type=type)
        if source.pk == target.pk:
            raise ServiceError("CYCLE", "An issue cannot relate to itself.")
        if kind == "blocks":
            lock_org_ranks(actor.org.pk)
            created = _edge_blocks(actor=actor, source=source, target=target, unit=unit)
        else:
            exists = Relation.objects.filter(type=kind, source__in=[source, target], target__in=[source, target]).exists()
            created = not exists
            if created:
                try:
                    Relation.objects.create(org_id=actor.org.pk, source=source, target=target, type=kind)
                except IntegrityError:
                    created = False
        if created:
            unit.record(
                "relation_added", issue=source, changes={"relation": [None, [kind, source.identifier, target.identifier]]}
            )
            if kind == "blocks":
                unit.record(
                    "relation_added", issue=target, changes={"relation": [None, [kind, source.identifier, target.identifier]]}
                )
    return {"source": source.identifier, "target": target.identifier, "type": kind, "created": created}


def relation_remove(*, actor: Actor, source_id: str, target_id: str, type: str) -> dict:
    with mutation(actor, "remove_relation") as unit:
        source, target, kind = _relation_ends(actor=actor, source_id=source_id, target_id=target_id, type=type)
        qs = Relation.objects.filter(type=kind, source=source, target=target)
        if kind != "blocks":
            qs = Relation.objects.filter(type=kind, source__in=[source, target], target__in=[source, target])
        else:
            lock_org_ranks(actor.org.pk)
        removed, _ = qs.delete()
        if removed:
            unit.rank_dirty(source.pk)
            unit.record(
                "relation_removed", issue=source, changes={"relation": [[kind, source.identifier, target.identifier], None]}
            )
            if kind == "blocks":
                unit.record(
                    "relation_removed", issue=target, changes={"relation": [[kind, source.identifier, target.identifier], None]}
                )
    return {"source": source.identifier, "target": target.identifier, "type": kind, "removed": bool(removed)}


# --- comments, labels, attachments ----------------------------------------------------


def comment_create(*, actor: Actor, issue: str, body) -> Comment:
    body = inputs.text(body, "body", required=True, limit=50_000)
    with mutation(actor, "save_comment") as unit:
        target = issue_resolve(actor=actor, identifier=issue)
        comment = Comment(org_id=actor.org.pk, issue=target, author_id=actor.principal_id, key=actor.key, runtime=actor.runtime)
        comment.body = body
        comment.save(force_insert=True)
        unit.record("commented", issue=target, changes={"comment": [None, {"id": str(comment.pk), "body": body}]})
    return comment


def comment_retract(*, actor: Actor, comment: str, note) -> Comment:
    note = inputs.text(note, "note", required=True, limit=2000)
    with mutation(actor, "retract_comment") as unit:
        row = _by_uuid(Comment, comment, actor, "Comment", lock=True)
        if row.retracted_at is not None:
            raise ServiceError("CONFLICT", "That comment is already retracted.")
        if row.author_id != actor.principal_id and not actor.is_owner:
            raise ServiceError("FORBIDDEN", "Only the comment's author or an org owner can retract it.")
        row.retracted_at = timezone.now()
        row.retracted_by_id = actor.principal_id
        row.retract_note = note
        row.save(update_fields=["retracted_at", "retracted_by", "retract_note_enc"])
        unit.record("comment_retracted", issue=row.issue_id, changes={"retracted": [None, {"id": str(row.pk), "note": note}]})
    return row


def label_save(*, actor: Actor, name, color=None) -> Label:
    name = inputs.text(name, "name", required=True, limit=60, one_line=True)
    color = inputs.color(color)
    with mutation(actor, "save_label") as unit:
        label, created = Label.objects.get_or_create(org_id=actor.org.pk, name=name, defaults={"color": color})
        if not created and label.color != color:
            unit.record("label_saved", changes={"label": [[name, label.color], [name, color]]})
            label.color = color
            label.save(update_fields=["color"])
        elif created:
            unit.record("label_saved", changes={"label": [None, [name, color]]})
    return label


def attachment_create(*, actor: Actor, issue: str, url, title=None) -> Attachment:
    url = inputs.url(url)
    title = inputs.text(title, "title", limit=300, one_line=True)
    with mutation(actor, "save_attachment") as unit:
        target = issue_resolve(actor=actor, identifier=issue)
        att = Attachment(org_id=actor.org.pk, issue=target, created_by_id=actor.principal_id, key=actor.key)
        att.url = url
        att.title = title
        att.save(force_insert=True)
        unit.record("attached", issue=target, changes={"attachment": [None, {"id": str(att.pk), "url": url, "title": title}]})
    return att


def attachment_obsolete(*, actor: Actor, attachment: str, reason) -> Attachment:
    reason = inputs.text(reason, "reason", required=True, limit=2000)
    with mutation(actor, "obsolete_attachment") as unit:
        att = _by_uuid(Attachment, attachment, actor, "Attachment", lock=True)
        if att.obsolete_at is not None:
            raise ServiceError("CONFLICT", "That attachment is already obsolete.")
        att.obsolete_at = timezone.now()
        att.obsolete_reason = reason
        att.save(update_fields=["obsolete_at", "obsolete_reason_enc"])
        unit.record(
            "attachment_obsoleted", issue=att.issue_id, changes={"obsolete": [None, {"id": str(att.pk), "reason": reason}]}
        )
    return att


def _by_uuid(model, ref, actor: Actor, what: str, lock: bool = False):
    try:
        pk = uuid.UUID(str(ref))
    except ValueError:
        raise not_found(what) from None
    qs = model.objects.select_related("issue__project").filter(pk=pk, org_id=actor.org.pk)
    if lock:
        qs = qs.select_for_update(no_key=True, of=("self",))
    row = qs.first()
    if row is None:
        raise not_found(what)
    return row


def checkpoint_write(*, actor: Actor, issue: Issue, note: str, claim_id, unit) -> Checkpoint:
    """Store a checkpoint as the issue's latest handoff. Called with the claim verified."""
    before = issue.checkpoint.note if issue.checkpoint_id else None
    cp = Checkpoint(
        org_id=actor.org.pk, issue=issue, author_id=actor.principal_id, key=actor.key, runtime=actor.runtime, claim_id=claim_id
    )
    cp.note = note
    cp.save(force_insert=True)
    issue.checkpoint = cp
    unit.record("checkpointed", issue=issue, changes={"checkpoint": [before, note]})
    return cp


# --- uploaded attachment files (PUT /api/v1/uploads/<token>) ---------------------------

UPLOAD_SALT = "retasc.attachment-upload"


def attachment_upload_prepare(*, actor: Actor, issue: str) -> dict:
    """A one-time signed URL to PUT one file onto ``issue``; the file is sealed on arrival.

    The token names the attachment id up front, so a second PUT with it is refused
    (CONFLICT): the id is the primary key of the row the first PUT creates.
    """

    target = issue_resolve(actor=actor, identifier=issue)
    attachment_id = uuid.uuid4()
    token = signing.dumps(
        {"o": str(actor.org.pk), "i": str(target.pk), "a": str(attachment_id), "p": actor.principal_id, "k": actor.key_id},
        salt=UPLOAD_SALT,
        compress=True,
    )
    metered_read(actor, "prepare_attachment_upload")
    expires = timezone.now() + timedelta(seconds=settings.RETASC_UPLOAD_URL_TTL_SECONDS)
    return {
        "uploadUrl": f"{settings.PUBLIC_URL}/api/v1/uploads/{token}",
        "method": "PUT",
        "expiresAt": iso(expires),
        "attachmentId": str(attachment_id),
        "maxBytes": settings.RETASC_UPLOAD_MAX_BYTES,
    }


def _upload_actor(claims: dict) -> Actor:
    """The actor who prepared the upload, if they still have access (else UNAUTHORIZED)."""

    refused = ServiceError("UNAUTHORIZED", "That upload link is invalid, expired or already used.")
    org = Org.objects.filter(pk=claims["o"], deleted_at__isnull=True).first()
    membership = (
        Membership.objects.select_related("user").filter(org=org, user_id=claims["p"], status=Membership.Status.ACTIVE).first()
        if org
        else None
    )
    if membership is None or not membership.user.is_active:
        raise refused
    if claims.get("k") is None:
        return Actor(
            org=org,
            principal_id=membership.user_id,
            key=None,
            runtime="dash",
            project=org.projects.order_by("created_at").first(),
            membership=membership,
        )
    key = AgentKey.objects.live().select_related("project").filter(pk=claims["k"], org=org, user_id=membership.user_id).first()
    if key is None:
        raise refused
    return Actor(
        org=org, principal_id=membership.user_id, key=key, runtime=key.runtime, project=key.project, membership=membership
    )


def attachment_upload_store(*, token: str, content: bytes, content_type: str = "", filename: str = "") -> Attachment:
    """Store an uploaded file (sealed) as a new attachment, with its receipt."""

    try:
        claims = signing.loads(token, salt=UPLOAD_SALT, max_age=settings.RETASC_UPLOAD_URL_TTL_SECONDS)
    except signing.BadSignature:
        raise ServiceError("UNAUTHORIZED", "That upload link is invalid, expired or already used.") from None
    if len(content) > settings.RETASC_UPLOAD_MAX_BYTES:
        raise ServiceError(
            "TOO_LARGE",
            f"A file may be at most {settings.RETASC_UPLOAD_MAX_BYTES} bytes.",
            maxBytes=settings.RETASC_UPLOAD_MAX_BYTES,
        )
    if not content:
        raise invalid("file", "The upload is empty.")
    content_type = (content_type or "application/octet-stream").split(";")[0].strip()[:120]
    title = inputs.text(filename or None, "filename", limit=300, one_line=True)
    actor = _upload_actor(claims)
    with mutation(actor, "save_attachment") as unit:
        target = Issue.objects.select_related("project").filter(pk=claims["i"], org_id=actor.org.pk).first()
        if target is None:
            raise not_found("Issue")
        if Attachment.objects.filter(pk=claims["a"]).exists():
            raise ServiceError("CONFLICT", "That upload link was already used.")
        att = Attachment(
            id=claims["a"],
            org_id=actor.org.pk,
            issue=target,
            created_by_id=actor.principal_id,
            key=actor.key,
            file_size=len(content),
            content_type=content_type,
        )
        att.url = f"{settings.PUBLIC_URL}/api/v1/attachments/{att.pk}/file"
        att.title = title
        att.file = content
        try:
            with transaction.atomic():
                att.save(force_insert=True)
        except IntegrityError:  # a concurrent PUT with the same link won
            raise ServiceError("CONFLICT", "That upload link was already used.") from None
        unit.record(
            "attached",
            issue=target,
            changes={
                "attachment": [
                    None,
                    {"id": str(att.pk), "url": att.url, "title": title, "size": len(content), "contentType": content_type},
                ]
            },
        )
    return att


# --- the org as a whole -----------------------------------------------------------------


def org_delete(*, org: Org) -> None:
    """Delete an org and crypto-shred its content: its data key is destroyed."""
    org_ref = str(org.pk)
    with transaction.atomic():
        # Issue.parent is PROTECT (a container cannot vanish under its children); the
        # whole org goes, so unhook the hierarchy first or the cascade refuses.
        Issue.objects.filter(org_id=org.pk, parent__isnull=False).update(parent=None)
        org.delete()
        transaction.on_commit(lambda: keystore.data_key_destroy(org_ref))


def org_delete_as(*, actor: Actor, confirmation: str) -> str:
    """An owner deletes their org from the Dash, typing its slug to confirm. Returns the
    slug. Only a person in the browser (no agent key, however admin): the one action
    that cannot be undone is never one call away from an agent."""
    owner_only(actor)
    if actor.key is not None:
        raise ServiceError("FORBIDDEN", "An org is deleted by an owner in the Dash, not with an agent key.")
    org = actor.org
    if (confirmation or "").strip() != org.slug:
        raise invalid("confirm", f"Type the org's slug, {org.slug}, to delete it.")
    org_delete(org=org)
    return org.slug
