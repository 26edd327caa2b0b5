"""Effective priority, materialized (SPEC §4).

eff(X) = min(base(X), eff(Y) for every *open* Y that X blocks)

so a blocker inherits the urgency of everything it transitively unblocks. The value is
stored on each issue (``effective_rank``, ``dispatch_rank``) and kept current
incrementally: a change to X's own inputs (priority, deadline, status) or to X's outgoing
``blocks`` edges can only change X and X's ancestors (its transitive blockers), so
``ranks_refresh`` recomputes exactly that set, children first, in a handful of queries.

Serialization: refreshes of one org run one at a time (an advisory lock on PostgreSQL;
SQLite's immediate transactions serialize on their own), each reading committed state
after taking the lock, so two concurrent refreshes cannot overwrite each other with
values computed from stale children. Services mark the issues they touch
``rank_dirty`` in their own transaction, then refresh right after commit; if the process
dies in between, the next refresh (dispatch or the periodic job) picks them up.
"""

from __future__ import annotations

import uuid
import zlib
from collections import defaultdict

from django.db import connection, transaction
from django.utils import timezone

from apps.core import sql
from apps.issues.models import Issue, Relation
from apps.issues.sla import base_rank, dispatch_rank

_OPEN_CLOSED = ("done", "canceled")


def lock_org_ranks(org_id) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [7301, _int32(org_id)])


def _int32(value) -> int:
    return zlib.crc32(str(value).encode()) - 2**31


def _db_uuid(value):
    return Issue._meta.pk.get_db_prep_value(value, connection)


def ancestors(ids, *, dirty_of_org=None) -> set:
    """ids plus every issue that transitively blocks one of them (one recursive query).

    With ``dirty_of_org``, the issues of that org marked ``rank_dirty`` are seeds too.
    """
    ids = list(ids)
    if not ids and dirty_of_org is None:
        return set()
    found: set = set()
    table, rel = Issue._meta.db_table, Relation._meta.db_table
    chunks = [ids[start : start + 500] for start in range(0, len(ids), 500)] or [[]]
    for n, chunk in enumerate(chunks):
        seeds, params = [], [_db_uuid(i) for i in chunk]
        if chunk:
            seeds.append(f"id IN ({','.join(['%s'] * len(chunk))})")
        if dirty_of_org is not None and n == 0:
            seeds.append("(org_id = %s AND rank_dirty)")
            params.append(_db_uuid_org(dirty_of_org))
        sql = (
            f"WITH RECURSIVE anc(id) AS ("
            f" SELECT id FROM {table} WHERE {' OR '.join(seeds)}"
            f" UNION SELECT r.source_id FROM {rel} r JOIN anc ON r.target_id = anc.id WHERE r.type = 'blocks'"
            f") SELECT id FROM anc"
        )
        with connection.cursor() as cur:
            cur.execute(sql, params)
            found.update(uuid.UUID(str(row[0])) for row in cur.fetchall())
    return found


def _db_uuid_org(value):
    return Issue._meta.get_field("org").target_field.get_db_prep_value(value, connection)


def ranks_refresh(*, org_id, issue_ids=(), now=None) -> int:
    """Recompute base ranks of ``issue_ids`` (and of any issue left dirty), then the
    effective ranks of them and all their ancestors. Returns how many rows changed.

    Statements: the lock, one recursive query for the affected set, one locking read of
    it, one read of its edges, and an UPDATE per distinct change.
    """
    now = now or timezone.now()
    with transaction.atomic():
        lock_org_ranks(org_id)
        given = {uuid.UUID(str(i)) for i in issue_ids}
        affected = ancestors(given, dirty_of_org=org_id)
        if not affected:
            return 0
        # Lock every row this refresh may write, in primary-key order, before writing any
        # (and read them in the same statement): writing them one group at a time
        # deadlocked against next_batch(claim) taking several of the same rows in another
        # order (tests/core/test_race_chain.py).
        names = [
            "id", "priority", "status", "created_at", "due_at", "base_rank", "sla_next_at",
            "effective_rank", "dispatch_rank", "rank_dirty",
        ]  # fmt: skip
        in_affected, params = sql.marks(Issue, list(affected))
        query = f"SELECT {', '.join(names)} FROM {Issue._meta.db_table} WHERE id IN ({in_affected}) ORDER BY id" + (
            " FOR NO KEY UPDATE" if connection.vendor == "postgresql" else ""
        )
        convert = sql.converter(Issue, names)
        with connection.cursor() as cur:
            cur.execute(query, params)
            rows = [convert(row) for row in cur.fetchall()]
        nodes: dict = {}
        own: dict = {}  # dirty issue -> its changed own columns (base rank, SLA time, flag)
        for pk, priority, status, created_at, due_at, base, next_at, eff_old, dispatch_old, flagged in rows:
            if pk in given or flagged:
                # 1. Own inputs of the dirty issues -> base rank and next SLA escalation time.
                rank, new_next = base_rank(priority=priority, status=status, created_at=created_at, due_at=due_at, now=now)
                fields = {"rank_dirty": False} if flagged else {}
                if (rank, new_next) != (base, next_at):
                    fields.update(base_rank=rank, sla_next_at=new_next)
                    base = rank
                if fields:
                    own[pk] = fields
            nodes[pk] = (base, status, eff_old, dispatch_old)
        # 2. Effective ranks over the affected set, children before parents.
        kids = defaultdict(list)
        outside = set()
        edge = sql.converter(Relation, ["source_id", "target_id"])
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT source_id, target_id FROM {Relation._meta.db_table} WHERE type = 'blocks' AND source_id IN ({in_affected})",
                params,
            )
            edges = [edge(row) for row in cur.fetchall()]
        for source, target in edges:
            kids[source].append(target)
            if target not in nodes:
                outside.add(target)
        fixed = {}
        if outside:
            in_outside, outside_params = sql.marks(Issue, list(outside))
            fixed_row = sql.converter(Issue, ["id", "effective_rank", "status"])
            with connection.cursor() as cur:
                cur.execute(
                    f"SELECT id, effective_rank, status FROM {Issue._meta.db_table} WHERE id IN ({in_outside})", outside_params
                )
                fixed = {row[0]: (row[1], row[2]) for row in map(fixed_row, cur.fetchall())}
        eff: dict = {}
        for node in _postorder(nodes, kids):
            best = nodes[node][0]
            for child in kids.get(node, ()):
                if child in nodes:
                    if nodes[child][1] not in _OPEN_CLOSED:
                        best = min(best, eff[child])
                elif child in fixed and fixed[child][1] not in _OPEN_CLOSED:
                    best = min(best, fixed[child][0])
            eff[node] = best
        changed = 0
        groups = defaultdict(list)
        for node, (_, status, old_eff, old_dispatch) in nodes.items():
            new = (eff[node], dispatch_rank(eff[node], status))
            if new != (old_eff, old_dispatch):
                changed += 1
                if node in own:
                    own[node].update(effective_rank=new[0], dispatch_rank=new[1])
                else:
                    groups[new].append(node)
        for node, fields in own.items():
            sql.update(Issue, node, fields)
        for (new_eff, new_dispatch), members in groups.items():
            sql.update_many(Issue, members, {"effective_rank": new_eff, "dispatch_rank": new_dispatch})
        return changed


def own_ranks(issue: Issue, now) -> dict | None:
    """The rank columns ``ranks_refresh`` would give ``issue``, computed in the caller's
    transaction, when that refresh would touch this issue alone: it is closing, and it is
    in no ``blocks`` edge (``issue.has_blocks_edges``, read with its locked row by
    ``issue_resolve(lock=True)``). None otherwise: then mark it ``rank_dirty``.

    Why that is the same: with no edge the issue has no ancestor to refresh and inherits
    from no child, so its effective rank is its base rank. A new edge into it needs its
    row lock (held by the caller); a new edge out of it changes the effective rank of a
    closed issue, which nothing reads until it reopens, and reopening refreshes it.
    The caller writes the returned columns with its own UPDATE of the row (no statement,
    no second transaction)."""
    if issue.status not in _OPEN_CLOSED or getattr(issue, "has_blocks_edges", True):
        return None
    rank, next_at = base_rank(
        priority=issue.priority, status=issue.status, created_at=issue.created_at, due_at=issue.due_at, now=now
    )
    return {
        "base_rank": rank,
        "sla_next_at": next_at,
        "effective_rank": rank,
        "dispatch_rank": dispatch_rank(rank, issue.status),
        "rank_dirty": False,
    }


def _postorder(nodes: dict, kids: dict) -> list:
    """Nodes with every in-set child before its parent (iterative: chains may be deep)."""
    order, state = [], {}
    for root in nodes:
        if root in state:
            continue
        stack = [(root, iter(kids.get(root, ())))]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            advanced = False
            for child in children:
                if child in nodes and child not in state:
                    state[child] = 1
                    stack.append((child, iter(kids.get(child, ()))))
                    advanced = True
                    break
            if not advanced:
                stack.pop()
                state[node] = 2
                order.append(node)
    return order


def sla_escalate(*, org_id=None, now=None) -> int:
    """Recompute ranks of issues whose deadline pressure changed since last time."""
    now = now or timezone.now()
    due = Issue.objects.filter(sla_next_at__lte=now)
    if org_id is not None:
        due = due.filter(org_id=org_id)
    by_org = defaultdict(list)
    for issue_id, issue_org in due.values_list("id", "org_id"):
        by_org[issue_org].append(issue_id)
    return sum(ranks_refresh(org_id=o, issue_ids=ids, now=now) for o, ids in by_org.items())


def ranks_catch_up(*, org_id, now=None) -> None:
    """Before a pull: apply due SLA escalations and any refresh a crash left behind.

    One statement with two indexed existence checks in the common case, so dispatch
    order never depends on a periodic tick.
    """
    now = now or timezone.now()
    with connection.cursor() as cur:
        # Written out (apps.core.sql explains why): every pull runs it.
        columns, params = catch_up_columns(org_id=org_id, now=now)
        cur.execute(f"SELECT {columns}", params)
        due, dirty = cur.fetchone()
    catch_up_apply(org_id=org_id, now=now, due=due, dirty=dirty)


def catch_up_columns(*, org_id, now) -> tuple[str, list]:
    """The two existence checks of ``ranks_catch_up`` as two select columns (``due``,
    ``dirty``), to ride on another statement; then ``catch_up_apply``."""
    table = Issue._meta.db_table
    return (
        f"EXISTS (SELECT 1 FROM {table} WHERE org_id = %s AND sla_next_at <= %s),"
        f" EXISTS (SELECT 1 FROM {table} WHERE org_id = %s AND rank_dirty)",
        [_db_uuid_org(org_id), Issue._meta.get_field("sla_next_at").get_db_prep_value(now, connection), _db_uuid_org(org_id)],
    )


def catch_up_apply(*, org_id, now, due: bool, dirty: bool) -> None:
    if due:
        sla_escalate(org_id=org_id, now=now)
    elif dirty:
        ranks_refresh(org_id=org_id, now=now)
