"""Dispatch, claims and leases (SPEC §4).

Claims are serialized per project: on PostgreSQL a transaction-scoped advisory lock on
the project, on SQLite the immediate write transaction every atomic block takes. Inside
that lock a claim is: pick the first eligible row by the dispatch index, then a
conditional UPDATE that only succeeds while the row is still free; exactly one row
must change. An expired lease counts as free the moment dispatch looks; taking such an
issue first records the reclaim (so no periodic tick is needed for correctness).
"""

from __future__ import annotations

import uuid
import zlib
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone
from django.utils.text import slugify

from apps.core import sql
from apps.core.errors import ServiceError, invalid
from apps.core.formats import iso
from apps.core.unit import metered_read, mutation
from apps.issues import handoff
from apps.issues.fencing import claim_fence, is_live, new_token
from apps.issues.models import CLOSED, DISPATCHABLE, Claim, Issue, Relation, Status
from apps.issues.ranking import catch_up_columns, ranks_catch_up
from apps.issues.selectors import issue_resolve, issue_with_people, issue_with_people_query
from apps.issues.services import author_cannot_review, checkpoint_write
from apps.issues.shapes import issue_shape, issue_shapes
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Org

MAX_BATCH = 25


def lock_project_claims(project_id: int, *, catch_up_of=None) -> bool:
    """Take the project's claim lock. With ``catch_up_of`` (an org id), the same statement
    also asks whether that org's ranks need ``ranks_catch_up`` first; returns True if so
    (PostgreSQL; False elsewhere, where the caller checks before)."""
    if connection.vendor != "postgresql":
        return False
    columns, params = ("", [])
    if catch_up_of is not None:
        columns, params = catch_up_columns(org_id=catch_up_of, now=timezone.now())
        columns = ", " + columns
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT pg_advisory_xact_lock(%s, %s){columns}", [7302, zlib.crc32(str(project_id).encode()) - 2**31, *params]
        )
        row = cur.fetchone()
    return catch_up_of is not None and any(row[1:])


class _CatchUpFirst(Exception):
    """Raised under the project lock when the org's ranks need a catch-up first."""


def _open_blocker_exists():
    return Exists(Relation.objects.filter(target_id=OuterRef("pk"), type=Relation.Type.BLOCKS).exclude(source__status__in=CLOSED))


def ready_queryset(*, actor: Actor, project_id: int, now, all_lanes: bool):
    """Eligible issues in dispatch order: the partial index ``issue_dispatch`` serves it."""
    qs = (
        Issue.objects.filter(project_id=project_id, work=True, awaiting_triage=False, status__in=DISPATCHABLE)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now))
        .exclude(status=Status.REVIEW, submitted_by_id=actor.principal_id)
        .exclude(_open_blocker_exists())
    )
    if not all_lanes:
        qs = qs.filter(Q(assignee_id__isnull=True) | Q(assignee_id=actor.principal_id))
    return qs.order_by("dispatch_rank", "created_at", "number")


def _live_claims_query(root_key_id: int, now) -> tuple[str, list]:
    expires = Claim._meta.get_field("expires_at").get_db_prep_value(now, connection)
    keys = AgentKey._meta.db_table
    return (
        f"SELECT COUNT(*) FROM {Claim._meta.db_table} WHERE ended_at IS NULL AND expires_at > %s"
        f" AND key_id IN (SELECT id FROM {keys} WHERE id = %s OR parent_id = %s)",
        [expires, root_key_id, root_key_id],
    )


def _live_claims(root_key_id: int, now) -> int:
    """Live claims held through ``root_key_id`` and every session key minted from it: a
    session key counts against its parent's cap (SPEC §2). Written out: it runs under
    the project lock on every pull."""
    with connection.cursor() as cur:
        cur.execute(*_live_claims_query(root_key_id, now))
        return cur.fetchone()[0]


def _sql_list(values) -> str:
    return ", ".join(f"'{getattr(v, 'value', v)}'" for v in values)


def _pick(*, actor: Actor, project_id: int, now, all_lanes: bool, with_held: bool = False) -> Issue | None:
    """``ready_queryset(...).first()``, written out once.

    A pull runs this under the project lock, and compiling the ORM version took more CPU
    than the rest of the locked section together. tests/leases/test_pick.py checks that
    the two choose the same issue in every case they distinguish.

    ``with_held``: the picked issue also carries ``held_claims``, what ``_live_claims``
    counts for the actor's key (the same statement, one round trip less under the lock).
    """
    if actor.principal_id is None:  # pragma: no cover - pulls are by agent keys
        raise ServiceError("FORBIDDEN", "Claims are held by agent keys; use an agent key.")
    issue_t, rel_t = Issue._meta.db_table, Relation._meta.db_table
    held, held_params = ("", [])
    if with_held and actor.key_id:
        held, held_params = _live_claims_query(actor.limit_key_id, now)
        held = f", ({held}) AS held_claims"
    # Columns by name, never ``i.*``: a prepared statement whose row type changes fails
    # ("cached plan must not change result type") once a migration adds a column, and
    # old processes keep running through an upgrade's migrate (deploy/README.md).
    query = (
        f"SELECT {sql.columns(Issue, 'i')}{held} FROM {issue_t} i"
        " WHERE i.project_id = %s AND i.work AND NOT i.awaiting_triage"
        f" AND i.status IN ({_sql_list(DISPATCHABLE)})"
        " AND (i.lease_expires_at IS NULL OR i.lease_expires_at <= %s)"
        " AND NOT (i.status = 'review' AND i.submitted_by_id IS NOT NULL AND i.submitted_by_id = %s)"
        f" AND NOT EXISTS (SELECT 1 FROM {rel_t} r JOIN {issue_t} s ON s.id = r.source_id"
        f" WHERE r.target_id = i.id AND r.type = 'blocks' AND s.status NOT IN ({_sql_list(CLOSED)}))"
    )
    params = [*held_params, project_id]
    params += [Issue._meta.get_field("lease_expires_at").get_db_prep_value(now, connection), actor.principal_id]
    if not all_lanes:
        query += " AND (i.assignee_id IS NULL OR i.assignee_id = %s)"
        params.append(actor.principal_id)
    query += " ORDER BY i.dispatch_rank, i.created_at, i.number LIMIT 1"
    for issue in Issue.objects.raw(query, params):
        issue.project = actor.project
        return issue
    return None


def _check_cap(actor: Actor, now, wanted: int = 1, held: int | None = None) -> None:
    cap = actor.org.effective_claim_cap
    if held is None:
        held = _live_claims(actor.limit_key_id, now) if actor.key_id else 0
    if held + wanted > cap:
        raise ServiceError(
            "CLAIM_CAP",
            f"This key and its session keys already hold {held} live claims (cap {cap}); finish or release one first.",
            tell_human=f"This agent key holds {held} claims, its cap of {cap}: it must finish or release one, or an owner raises the claim cap (Dash > Org settings).",
            ask_human=f"I hold my cap of {cap} claims; shall I release one, or can an owner raise the claim cap?",
            held=held,
            cap=cap,
        )


def _branch(issue: Issue) -> str:
    slug = slugify(issue.title or "")[:40].strip("-") or "work"
    return f"{issue.project.prefix.lower()}-{issue.number}/{slug}"


def _take(*, issue: Issue, actor: Actor, now, unit, kind: str) -> tuple[Claim, str]:
    """Mark ``issue`` held by a new claim. Caller holds the project lock and has checked
    eligibility; the conditional UPDATE re-checks that the lease is still free."""
    ttl = timedelta(seconds=actor.org.lease_ttl)
    prior_claim = issue.lease_claim_id
    expired = prior_claim is not None and issue.lease_expires_at is not None and issue.lease_expires_at <= now
    if expired:
        _reclaim(issue=issue, now=now, unit=unit)
    raw, digest = new_token()
    claim = Claim(
        org_id=actor.org.pk,
        issue=issue,
        key=actor.key,
        principal_id=actor.principal_id,
        kind=kind,
        token_hash=digest,
        created_at=now,
        expires_at=now + ttl,
        last_heartbeat_at=now,
    )
    # Written-out statements (apps.core.sql): this runs under the project lock.
    row = [{f.attname: getattr(claim, f.attname) for f in Claim._meta.concrete_fields if not f.primary_key}]
    new_status = Status.DOING if kind == Claim.Kind.WORK else Status.REVIEW
    # Conditional: only while the row is still free (the project lock makes it so).
    issue_t = Issue._meta.db_table
    field = Issue._meta.get_field
    mark = (
        f"UPDATE {issue_t} SET status = %s, lease_claim_id = {{claim}}, lease_principal_id = %s, lease_expires_at = %s,"
        " updated_at = %s WHERE id = %s AND status = %s AND (lease_claim_id IS NULL OR lease_expires_at <= %s)"
    )
    mark_params = [
        actor.principal_id,
        field("lease_expires_at").get_db_prep_value(claim.expires_at, connection),
        field("updated_at").get_db_prep_value(now, connection),
        Issue._meta.pk.get_db_prep_value(issue.pk, connection),
        field("status").get_db_prep_value(issue.status, connection),
        field("lease_expires_at").get_db_prep_value(now, connection),
    ]
    status = field("status").get_db_prep_value(new_status, connection)
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            # The claim row and the issue's mark in one statement; if the mark matches no
            # row, the claim row is rolled back with the refusal below.
            insert, insert_params = sql.insert_statement(Claim, row)
            cur.execute(
                f"WITH c AS ({insert} RETURNING id) " + mark.format(claim="(SELECT id FROM c)") + " RETURNING lease_claim_id",
                [*insert_params, status, *mark_params],
            )
            got = cur.fetchone()
            changed, claim.pk = (1, got[0]) if got else (0, None)
        else:
            claim.pk = sql.insert(Claim, row, returning_pk=True)
            cur.execute(mark.format(claim="%s"), [status, claim.pk, *mark_params])
            changed = cur.rowcount
    claim._state.adding = False
    if changed != 1:  # pragma: no cover - the project lock makes this unreachable
        raise ServiceError("HELD", f"{issue.identifier} was taken a moment ago; pull again.")
    before = issue.status
    issue.status, issue.lease_claim_id, issue.lease_principal_id = new_status, claim.pk, actor.principal_id
    issue.lease_expires_at, issue.updated_at = claim.expires_at, now
    issue.__dict__["_claim_key"] = actor.key_id
    changes = {"claim": [None, {"kind": kind, "expiresAt": claim.expires_at.isoformat()}]}
    if before != new_status:
        changes["status"] = [before, new_status]
    unit.record("claimed" if kind == "work" else "review_claimed", issue=issue, changes=changes)
    return claim, raw


def _reclaim(*, issue: Issue, now, unit) -> None:
    """An expired lease ends: doing -> todo (a review stays in review), reclaimCount + 1."""
    Claim.objects.filter(pk=issue.lease_claim_id, ended_at__isnull=True).update(ended_at=now, end_reason=Claim.End.EXPIRED)
    new_status = Status.TODO if issue.status == Status.DOING else issue.status
    Issue.objects.filter(pk=issue.pk).update(
        status=new_status,
        reclaim_count=F("reclaim_count") + 1,
        lease_claim_id=None,
        lease_principal_id=None,
        lease_expires_at=None,
        updated_at=now,
    )
    changes = {"reclaimCount": [issue.reclaim_count, issue.reclaim_count + 1], "claim": ["expired", None]}
    if new_status != issue.status:
        changes["status"] = [issue.status, new_status]
    unit.record("reclaimed", issue=issue, changes=changes)
    issue.status, issue.reclaim_count = new_status, issue.reclaim_count + 1
    issue.lease_claim_id = issue.lease_principal_id = issue.lease_expires_at = None


def claim_answer(*, issue: Issue, claim: Claim, raw: str, actor: Actor, now) -> dict:
    checkpoint = issue.checkpoint
    return {
        "issue": issue_shape(issue, actor=actor, now=now),
        "claimToken": raw,
        "claimExpiresAt": iso(claim.expires_at),
        "branch": _branch(issue),
        "resumed": checkpoint is not None,
        "checkpoint": handoff.text(checkpoint.note) if checkpoint else None,
        "handoff": handoff.fields(checkpoint.note) if checkpoint else None,
        "checkpointBy": checkpoint.author.email if checkpoint and checkpoint.author_id else None,
        "reclaimCount": issue.reclaim_count,
    }


def _require_agent(actor: Actor) -> None:
    if not actor.is_agent:
        raise ServiceError("FORBIDDEN", "Claims are held by agent keys; use an agent key.")


# --- pulls ----------------------------------------------------------------------------


def next_issue(*, actor: Actor, all_lanes: bool = False) -> dict:
    """Claim the first eligible issue, or say why there is none."""
    _require_agent(actor)
    # Due SLA escalations and ranks a crash left dirty are applied before a pull. On
    # PostgreSQL the check rides on the project lock's statement; in the rare case it
    # finds work, the pull is rolled back (nothing written yet), caught up, and redone.
    folded = connection.vendor == "postgresql"
    if not folded:
        ranks_catch_up(org_id=actor.org.pk)
    try:
        return _next_issue(actor, all_lanes, check_catch_up=folded)
    except _CatchUpFirst:
        ranks_catch_up(org_id=actor.org.pk)
        return _next_issue(actor, all_lanes, check_catch_up=False)


def _next_issue(actor: Actor, all_lanes: bool, *, check_catch_up: bool) -> dict:
    project_id = actor.project.pk
    with mutation(actor, "next_issue") as unit:
        if lock_project_claims(project_id, catch_up_of=actor.org.pk if check_catch_up else None):
            raise _CatchUpFirst
        now = timezone.now()
        issue = _pick(actor=actor, project_id=project_id, now=now, all_lanes=all_lanes, with_held=True)
        # The cap is checked on the count read with the pick; with nothing to pick, on its
        # own statement (a key at its cap is told so even when the queue is empty).
        _check_cap(actor, now, held=getattr(issue, "held_claims", None))
        if issue is None:
            unit.charge = False  # an empty pull is billed as a read below
            empty = True
        else:
            empty = False
            kind = Claim.Kind.REVIEW if issue.status == Status.REVIEW else Claim.Kind.WORK
            claim, raw = _take(issue=issue, actor=actor, now=now, unit=unit, kind=kind)
            # The answer's read rides on the writer's last statement (it sees the claim).
            unit.read_with_flush(*issue_with_people_query(issue.pk))
    if empty:
        metered_read(actor, "next_issue_empty")
        counts = queue_counts(actor=actor, project_id=project_id, now=timezone.now())
        return {"issue": None, **counts, "tellHuman": unblock_hint(counts)}
    # Shaped after commit, outside the lock (people and relations come with this read).
    issue = issue_with_people(issue.pk, row=unit.answer_row)
    issue.__dict__["_claim_key"] = actor.key_id
    return claim_answer(issue=issue, claim=claim, raw=raw, actor=actor, now=now)


def unblock_hint(counts: dict) -> str:
    """One sentence for a person: what would put work in this agent's queue."""
    parts = []
    if counts["awaitingTriage"]:
        parts.append(f"{counts['awaitingTriage']} issue(s) await triage (accept them in the Dash)")
    if counts["otherLanes"]:
        parts.append(
            f"{counts['otherLanes']} ready issue(s) are in teammates' lanes (unassign them, or let me pull with allLanes)"
        )
    if counts["blocked"]:
        parts.append(f"{counts['blocked']} issue(s) are blocked (finish their blockers or clear the blocked flag)")
    if counts["claimed"]:
        parts.append(f"{counts['claimed']} issue(s) are held by other agents")
    if not parts:
        return "The queue is empty: file new work (save_issue, the Dash or a connector) to give agents something to do."
    return "No work is ready for me: " + "; ".join(parts) + "."


def queue_counts(*, actor: Actor, project_id: int, now) -> dict:
    base = Issue.objects.filter(project_id=project_id, work=True)
    ready_all = ready_queryset(actor=actor, project_id=project_id, now=now, all_lanes=True)
    mine = ready_queryset(actor=actor, project_id=project_id, now=now, all_lanes=False).count()
    return {
        "ready": mine,
        "otherLanes": ready_all.count() - mine,
        "blocked": base.exclude(status__in=CLOSED).filter(Q(status=Status.BLOCKED) | Q(_open_blocker_exists())).count(),
        "claimed": base.filter(lease_expires_at__gt=now).count(),
        "awaitingTriage": base.exclude(status__in=CLOSED).filter(awaiting_triage=True).count(),
    }


def next_batch(*, actor: Actor, n=5, claim: bool = False, all_lanes: bool = False) -> dict:
    """Up to n eligible issues with no blocks path and no duplicate edge between any two."""
    try:
        whole = int(n)
    except (TypeError, ValueError, OverflowError):
        raise invalid("n", f"n is 1-{MAX_BATCH}.") from None
    # int() would quietly truncate 2.5 and read True as 1: refuse them instead.
    if isinstance(n, bool) or (isinstance(n, float) and n != whole):
        raise invalid("n", f"n is a whole number 1-{MAX_BATCH}.")
    n = whole
    if not 1 <= n <= MAX_BATCH:
        raise invalid("n", f"n is 1-{MAX_BATCH}.")
    if claim:
        _require_agent(actor)
    ranks_catch_up(org_id=actor.org.pk)
    project_id = actor.project.pk
    if not claim:
        now = timezone.now()
        picked = _independent(ready_queryset(actor=actor, project_id=project_id, now=now, all_lanes=all_lanes), n)
        metered_read(actor, "next_batch")
        rows = list(Issue.objects.with_people().filter(pk__in=[i.pk for i in picked]))
        order = {i.pk: k for k, i in enumerate(picked)}
        rows.sort(key=lambda i: order[i.pk])
        return {"issues": issue_shapes(rows, actor=actor, now=now)}
    taken = []
    with mutation(actor, "next_batch_claim") as unit:
        lock_project_claims(project_id)
        now = timezone.now()
        cap = actor.org.effective_claim_cap
        room = cap - (_live_claims(actor.limit_key_id, now) if actor.key_id else 0)
        if room <= 0:
            _check_cap(actor, now)
        picked = _independent(
            ready_queryset(actor=actor, project_id=project_id, now=now, all_lanes=all_lanes).select_related("project"),
            min(n, room),
        )
        # Several rows: lock them in primary-key order first (ranks_refresh locks the same
        # way); updating them in dispatch order deadlocked against a concurrent refresh.
        list(
            Issue.objects.filter(pk__in=[i.pk for i in picked])
            .order_by("pk")
            .select_for_update(no_key=True)
            .values_list("pk", flat=True)
        )
        for issue in picked:
            kind = Claim.Kind.REVIEW if issue.status == Status.REVIEW else Claim.Kind.WORK
            taken.append((issue.pk,) + _take(issue=issue, actor=actor, now=now, unit=unit, kind=kind))
        if not taken:
            unit.charge = False
    rows = {i.pk: i for i in Issue.objects.with_people().filter(pk__in=[t[0] for t in taken])}
    return {"claims": [claim_answer(issue=rows[pk], claim=c, raw=raw, actor=actor, now=now) for pk, c, raw in taken]}


def _independent(queryset, n: int) -> list[Issue]:
    """Greedy in dispatch order: skip a candidate related to an already-picked one."""
    candidates = list(queryset[: max(n * 4, 20)])
    if len(candidates) <= 1:
        return candidates[:n]
    ids = [c.pk for c in candidates]
    reach = _reachability(ids)
    dupes = set(
        Relation.objects.filter(type=Relation.Type.DUPLICATE, source_id__in=ids, target_id__in=ids).values_list(
            "source_id", "target_id"
        )
    )
    picked: list[Issue] = []
    for cand in candidates:
        if len(picked) == n:
            break
        clash = any(
            p.pk in reach.get(cand.pk, ())
            or cand.pk in reach.get(p.pk, ())
            or (cand.pk, p.pk) in dupes
            or (p.pk, cand.pk) in dupes
            for p in picked
        )
        if not clash:
            picked.append(cand)
    return picked


def _reachability(ids) -> dict:
    """For each id, the set of issues it reaches through ``blocks`` edges (any status)."""

    table = Relation._meta.db_table
    prep = Issue._meta.pk.get_db_prep_value
    marks = ",".join(["%s"] * len(ids))
    sql = (
        f"WITH RECURSIVE reach(root, node) AS ("
        f" SELECT source_id, target_id FROM {table} WHERE type = 'blocks' AND source_id IN ({marks})"
        f" UNION SELECT reach.root, r.target_id FROM {table} r JOIN reach ON r.source_id = reach.node WHERE r.type = 'blocks'"
        f") SELECT root, node FROM reach"
    )
    out: dict = {}
    with connection.cursor() as cur:
        cur.execute(sql, [prep(i, connection) for i in ids])
        for root, node in cur.fetchall():
            out.setdefault(uuid.UUID(str(root)), set()).add(uuid.UUID(str(node)))
    return out


# --- explicit claims and the work loop ------------------------------------------------


def claim_issue(*, actor: Actor, identifier: str, claim_token: str | None = None) -> dict:
    """Claim one issue whatever its lane, or rebind your own live claim (resume door)."""
    _require_agent(actor)
    with mutation(actor, "claim_issue") as unit:
        issue = issue_resolve(actor=actor, identifier=identifier)
        lock_project_claims(issue.project_id)
        issue = issue_resolve(actor=actor, identifier=identifier, lock=True)
        now = timezone.now()
        if claim_token:
            claim = claim_fence(issue=issue, actor=actor, token=claim_token, now=now, required=True, rebinding=True)
            # Rebind: the same claim moves to the calling (session) key, lease renewed.
            claim.key = actor.key
            claim.expires_at = now + timedelta(seconds=actor.org.lease_ttl)
            claim.last_heartbeat_at = now
            claim.save(update_fields=["key", "expires_at", "last_heartbeat_at"])
            Issue.objects.filter(pk=issue.pk).update(lease_expires_at=claim.expires_at)
            unit.record("claim_rebound", issue=issue, changes={"claim": [None, {"key": actor.key.prefix}]})
            raw = claim_token
        else:
            _eligible(issue=issue, actor=actor, now=now)
            _check_cap(actor, now)
            kind = Claim.Kind.REVIEW if issue.status == Status.REVIEW else Claim.Kind.WORK
            claim, raw = _take(issue=issue, actor=actor, now=now, unit=unit, kind=kind)
    issue = issue_with_people(issue.pk)
    return claim_answer(issue=issue, claim=claim, raw=raw, actor=actor, now=now)


def _eligible(*, issue: Issue, actor: Actor, now) -> None:
    """Raise the refusal that explains why ``issue`` cannot be claimed now."""
    if not issue.work:
        raise ServiceError("NOT_WORK", f"{issue.identifier} is a container (work:false); claim its children.")
    if issue.status not in DISPATCHABLE:
        raise ServiceError(
            f"NOT_ELIGIBLE:{issue.status}", f"{issue.identifier} is {issue.status}; it cannot be claimed.", status=issue.status
        )
    if issue.awaiting_triage:
        raise ServiceError(
            "AWAITING_TRIAGE",
            f"{issue.identifier} arrived from outside and awaits a human's sign-off.",
            tell_human=f"Triage {issue.identifier} in the Dash.",
            ask_human=f"{issue.identifier} came in from outside; can you accept or reject it in the Dash so it can be worked on?",
        )
    blockers = list(
        Relation.objects.filter(target=issue, type=Relation.Type.BLOCKS)
        .exclude(source__status__in=CLOSED)
        .select_related("source__project")
        .order_by("source__number")
    )
    if blockers:
        raise ServiceError(
            "BLOCKED",
            f"{issue.identifier} waits on {len(blockers)} open blocker(s).",
            blockers=[{"identifier": r.source.identifier, "status": r.source.status} for r in blockers],
        )
    if issue.status == Status.REVIEW and issue.submitted_by_id == actor.principal_id:
        raise author_cannot_review(issue.identifier)
    if is_live(issue, now):
        holder = get_user_model().objects.filter(pk=issue.lease_principal_id).values_list("email", flat=True).first()
        raise ServiceError(
            "HELD",
            f"{issue.identifier} is held until {issue.lease_expires_at.isoformat()}.",
            heldBy=holder,
            expiresAt=issue.lease_expires_at.isoformat(),
        )


def check_claim(*, actor: Actor, identifier: str) -> dict:
    issue = issue_resolve(actor=actor, identifier=identifier)
    now = timezone.now()
    metered_read(actor, "check_claim")
    if not is_live(issue, now):
        return {"identifier": issue.identifier, "held": False, "youHold": False, "expiresAt": None, "status": issue.status}
    claim = Claim.objects.select_related("principal", "key").get(pk=issue.lease_claim_id)
    return {
        "identifier": issue.identifier,
        "held": True,
        "status": issue.status,
        "youHold": claim.key_id == actor.key_id,
        "yourPrincipalHolds": claim.principal_id == actor.principal_id,
        "heldBy": claim.principal.email,
        "runtime": claim.key.runtime,
        "kind": claim.kind,
        "expiresAt": iso(claim.expires_at),
    }


def _renew(*, issue: Issue, claim: Claim, actor: Actor, now) -> None:
    claim.expires_at = now + timedelta(seconds=actor.org.lease_ttl)
    claim.last_heartbeat_at = now
    Claim.objects.filter(pk=claim.pk).update(expires_at=claim.expires_at, last_heartbeat_at=now)
    Issue.objects.filter(pk=issue.pk, lease_claim_id=claim.pk).update(lease_expires_at=claim.expires_at)


def heartbeat(*, actor: Actor, identifier: str, claim_token: str) -> dict:
    """Renew the lease. Needs the live claim's token. No receipt: a heartbeat changes no content."""

    with mutation(actor, "heartbeat"):
        issue = issue_resolve(actor=actor, identifier=identifier, lock=True)
        now = timezone.now()
        claim = claim_fence(issue=issue, actor=actor, token=claim_token, now=now, required=True)
        _renew(issue=issue, claim=claim, actor=actor, now=now)
    return {"identifier": issue.identifier, "claimExpiresAt": iso(claim.expires_at)}


def checkpoint(*, actor: Actor, identifier: str, note, claim_token: str) -> dict:
    """Save the handoff note (survives release and reclaim) and renew the lease."""

    note = handoff.parse(note, required=True)
    with mutation(actor, "checkpoint") as unit:
        issue = issue_resolve(actor=actor, identifier=identifier, lock=True)
        now = timezone.now()
        claim = claim_fence(issue=issue, actor=actor, token=claim_token, now=now, required=True)
        checkpoint_write(actor=actor, issue=issue, note=note, claim_id=claim.pk, unit=unit)
        Issue.objects.filter(pk=issue.pk).update(checkpoint=issue.checkpoint, updated_at=now)
        _renew(issue=issue, claim=claim, actor=actor, now=now)
    return {
        "identifier": issue.identifier,
        "checkpoint": handoff.text(note),
        "handoff": handoff.fields(note),
        "claimExpiresAt": iso(claim.expires_at),
    }


def release_issue(*, actor: Actor, identifier: str, claim_token: str, note=None) -> dict:
    """Give the issue back: doing -> todo (a review stays in review). A note becomes the checkpoint."""
    note = handoff.parse(note, required=False)
    with mutation(actor, "release_issue") as unit:
        issue = issue_resolve(actor=actor, identifier=identifier, lock=True)
        now = timezone.now()
        claim = claim_fence(issue=issue, actor=actor, token=claim_token, now=now, required=True)
        if note:
            checkpoint_write(actor=actor, issue=issue, note=note, claim_id=claim.pk, unit=unit)
        Claim.objects.filter(pk=claim.pk).update(ended_at=now, end_reason=Claim.End.RELEASED)
        new_status = Status.TODO if issue.status == Status.DOING else issue.status
        Issue.objects.filter(pk=issue.pk).update(
            status=new_status,
            lease_claim_id=None,
            lease_principal_id=None,
            lease_expires_at=None,
            checkpoint=issue.checkpoint,
            updated_at=now,
        )
        changes = {"claim": ["held", None]}
        if new_status != issue.status:
            changes["status"] = [issue.status, new_status]
        unit.record("released", issue=issue, changes=changes)
    return {"identifier": issue.identifier, "status": new_status, "released": True}


# --- reclaim job ----------------------------------------------------------------------


def reclaim_expired(*, now=None, limit: int = 1000) -> int:
    """Free every expired lease with its receipt. Idempotent: safe to run anywhere, often."""

    now = now or timezone.now()
    done = 0
    rows = list(Issue.objects.filter(lease_expires_at__lte=now).values_list("pk", "org_id", "project_id")[:limit])
    orgs = {o.pk: o for o in Org.objects.filter(pk__in={r[1] for r in rows})}
    for pk, org_id, project_id in rows:
        actor = Actor.system(orgs[org_id])
        with mutation(actor, "reclaim", charge=False) as unit:
            lock_project_claims(project_id)
            issue = (
                Issue.objects.select_for_update(no_key=True, of=("self",))
                .select_related("project")
                .filter(pk=pk, lease_expires_at__lte=now)
                .first()
            )
            if issue is None:  # another worker or a heartbeat got there first
                continue
            _reclaim(issue=issue, now=now, unit=unit)
            done += 1
    return done


def claims_end_for_keys(*, org, key_ids) -> int:
    """End the live claims of revoked keys: their issues become free at once."""
    now = timezone.now()
    ended = 0
    for claim in Claim.objects.filter(key_id__in=key_ids, ended_at__isnull=True).select_related("issue__project"):
        actor = Actor.system(org)
        with mutation(actor, "claim_revoked", charge=False) as unit:
            Claim.objects.filter(pk=claim.pk).update(ended_at=now, end_reason=Claim.End.REVOKED)
            issue = claim.issue
            if issue.lease_claim_id == claim.pk:
                new_status = Status.TODO if issue.status == Status.DOING else issue.status
                Issue.objects.filter(pk=issue.pk, lease_claim_id=claim.pk).update(
                    status=new_status, lease_claim_id=None, lease_principal_id=None, lease_expires_at=None
                )
                unit.record("released", issue=issue, changes={"claim": ["revoked", None], "status": [issue.status, new_status]})
            ended += 1
    return ended
