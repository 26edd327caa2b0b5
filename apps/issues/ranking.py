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


def ancestors(ids) -> set:
    """ids plus every issue that transitively blocks one of them (one recursive query)."""
    ids = list(ids)
    if not ids:
        return set()
    found: set = set()
    table, rel = Issue._meta.db_table, Relation._meta.db_table
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join(["%s"] * len(chunk))
        sql = (
            f"WITH RECURSIVE anc(id) AS ("
            f" SELECT id FROM {table} WHERE id IN ({marks})"
            f" UNION SELECT r.source_id FROM {rel} r JOIN anc ON r.target_id = anc.id WHERE r.type = 'blocks'"
            f") SELECT id FROM anc"
        )
        with connection.cursor() as cur:
            cur.execute(sql, [_db_uuid(i) for i in chunk])
            found.update(uuid.UUID(str(row[0])) for row in cur.fetchall())
    return found


def ranks_refresh(*, org_id, issue_ids=(), now=None) -> int:
    """Recompute base ranks of ``issue_ids`` (and of any issue left dirty), then the
    effective ranks of them and all their ancestors. Returns how many rows changed."""
    now = now or timezone.now()
    with transaction.atomic():
        lock_org_ranks(org_id)
        dirty = {uuid.UUID(str(i)) for i in issue_ids}
        dirty.update(Issue.objects.filter(org_id=org_id, rank_dirty=True).values_list("id", flat=True))
        if not dirty:
            return 0
        changed = 0
        affected = ancestors(dirty)
        # Lock every row this refresh may write, in primary-key order, before writing any:
        # writing them one group at a time deadlocked against next_batch(claim) taking
        # several of the same rows in another order (tests/core/test_race_chain.py).
        list(Issue.objects.filter(pk__in=affected).order_by("pk").select_for_update(no_key=True).values_list("pk", flat=True))
        # 1. Own inputs of the dirty issues -> base rank and next SLA escalation time.
        for row in Issue.objects.filter(pk__in=dirty).values(
            "id", "priority", "status", "created_at", "due_at", "base_rank", "sla_next_at"
        ):
            rank, next_at = base_rank(
                priority=row["priority"], status=row["status"], created_at=row["created_at"], due_at=row["due_at"], now=now
            )
            if rank != row["base_rank"] or next_at != row["sla_next_at"]:
                Issue.objects.filter(pk=row["id"]).update(base_rank=rank, sla_next_at=next_at)
        # 2. Effective ranks over the affected set, children before parents.
        nodes = {
            row[0]: row[1:]
            for row in Issue.objects.filter(pk__in=affected).values_list(
                "id", "base_rank", "status", "effective_rank", "dispatch_rank"
            )
        }
        kids = defaultdict(list)
        outside = set()
        for source, target in Relation.objects.filter(source_id__in=affected, type=Relation.Type.BLOCKS).values_list(
            "source_id", "target_id"
        ):
            kids[source].append(target)
            if target not in nodes:
                outside.add(target)
        fixed = {
            row[0]: (row[1], row[2]) for row in Issue.objects.filter(pk__in=outside).values_list("id", "effective_rank", "status")
        }
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
        groups = defaultdict(list)
        for node, (_, status, old_eff, old_dispatch) in nodes.items():
            new = (eff[node], dispatch_rank(eff[node], status))
            if new != (old_eff, old_dispatch):
                groups[new].append(node)
        for (new_eff, new_dispatch), members in groups.items():
            changed += Issue.objects.filter(pk__in=members).update(effective_rank=new_eff, dispatch_rank=new_dispatch)
        Issue.objects.filter(pk__in=dirty, rank_dirty=True).update(rank_dirty=False)
        return changed


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

    Two cheap indexed existence checks in the common case, so dispatch order never
    depends on a periodic tick.
    """
    now = now or timezone.now()
    if Issue.objects.filter(org_id=org_id, sla_next_at__lte=now).exists():
        sla_escalate(org_id=org_id, now=now)
    elif Issue.objects.filter(org_id=org_id, rank_dirty=True).exists():
        ranks_refresh(org_id=org_id, now=now)
