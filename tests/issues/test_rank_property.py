"""Materialized effective rank against a brute-force walk (SPEC §4, apps.issues.ranking).

Random blocks graphs, priorities, deadlines and statuses; after every single mutation
(edge added or removed, priority, deadline, status, the clock moving with an SLA
escalation or a catch-up) each issue's stored rank must equal

    eff(X) = min base(X') over X and every X' reachable from X through blocks edges
             whose nodes after X are all open,

with base from apps.issues.sla.base_rank at the current (controlled) time, and
dispatch_rank == sla.dispatch_rank(eff, status).
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from hypothesis import HealthCheck, Phase, given, note
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from apps.core.errors import ServiceError
from apps.issues import sla
from apps.issues.models import Issue, Relation
from apps.issues.ranking import ranks_catch_up, ranks_refresh, sla_escalate
from apps.issues.services import issue_update, relation_add, relation_remove
from apps.orgs.services import actor_for_human
from tests.conftest import new_issue

CLOSED = ("done", "canceled")
STATUSES = ("todo", "blocked", "review", "done", "canceled")
DUE = st.one_of(st.none(), st.integers(min_value=-120, max_value=24 * 60))  # minutes from now

issue_spec = st.fixed_dictionaries(
    {
        "priority": st.integers(min_value=0, max_value=4),
        "due": DUE,
        "blockers": st.lists(st.integers(min_value=0, max_value=11), max_size=2),
        "age": st.integers(min_value=0, max_value=120),  # minutes the clock moves before it is created
    }
)


def _ops(n: int):
    idx = st.integers(min_value=0, max_value=n - 1)
    return st.lists(
        st.one_of(
            st.tuples(st.just("edge"), idx, idx, st.sampled_from(["blocks", "blocked_by", "update"])),
            st.tuples(st.just("unedge"), idx, idx),
            st.tuples(st.just("priority"), idx, st.integers(min_value=0, max_value=4)),
            st.tuples(st.just("due"), idx, DUE),
            st.tuples(st.just("status"), idx, st.sampled_from(STATUSES)),
            st.tuples(st.just("tick"), st.integers(min_value=1, max_value=600), st.sampled_from(["escalate", "catch_up"])),
        ),
        min_size=1,
        max_size=25,
    )


scenario = st.lists(issue_spec, min_size=2, max_size=12).flatmap(lambda specs: st.tuples(st.just(specs), _ops(len(specs))))


def _reaches(edges: set, start, goal) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(t for s, t in edges if s == node)
    return False


def _check(ids: list, edges: set, now) -> None:
    """Stored ranks == the brute-force definition, for every issue of the scenario."""
    rows = {
        r["id"]: r
        for r in Issue.objects.filter(pk__in=ids).values(
            "id",
            "number",
            "priority",
            "status",
            "created_at",
            "due_at",
            "base_rank",
            "effective_rank",
            "dispatch_rank",
        )
    }
    stored_edges = set(Relation.objects.filter(source_id__in=ids, type="blocks").values_list("source_id", "target_id"))
    assert stored_edges == edges
    base = {
        pk: sla.base_rank(priority=r["priority"], status=r["status"], created_at=r["created_at"], due_at=r["due_at"], now=now)[0]
        for pk, r in rows.items()
    }
    kids: dict = {}
    for s, t in edges:
        kids.setdefault(s, []).append(t)
    for pk, r in rows.items():
        best, seen, stack = base[pk], {pk}, list(kids.get(pk, ()))
        while stack:
            node = stack.pop()
            if node in seen or rows[node]["status"] in CLOSED:
                continue
            seen.add(node)
            best = min(best, base[node])
            stack.extend(kids.get(node, ()))
        label = f"#{r['number']} ({r['status']})"
        assert r["base_rank"] == base[pk], f"{label}: stored base {r['base_rank']}, expected {base[pk]}"
        assert r["effective_rank"] == best, f"{label}: stored effective {r['effective_rank']}, expected {best}"
        assert r["dispatch_rank"] == sla.dispatch_rank(best, r["status"]), f"{label}: dispatch_rank drifted"


def _due(clock, minutes):
    return None if minutes is None else (clock.now + timedelta(minutes=minutes)).isoformat()


def _set_status(human, issue, status: str) -> None:
    current = Issue.objects.values_list("status", flat=True).get(pk=issue.pk)
    if status == current:
        return
    if status == "review" or current == "review":
        # Entering or leaving review takes a reviewer, a handoff and a claim: set the row
        # directly, then refresh as a service would after commit.
        Issue.objects.filter(pk=issue.pk).update(status=status)
        ranks_refresh(org_id=issue.org_id, issue_ids=[issue.pk])
        return
    extra = {"cancel_reason": "no longer needed"} if status == "canceled" else {}
    issue_update(actor=human, identifier=issue.identifier, status=status, **extra)


def _run(world, clock, specs, ops) -> None:
    human = actor_for_human(user=world.owner, org=world.org)
    agent = world.a
    issues: list = []
    edges: set = set()
    for k, spec in enumerate(specs):
        clock.advance(minutes=spec["age"])
        ranks_catch_up(org_id=world.org.pk, now=clock.now)  # what the next pull would do first
        blockers = sorted({b for b in spec["blockers"] if b < k})
        kwargs = {"blocked_by": [issues[b].identifier for b in blockers]} if blockers else {}
        issue = new_issue(agent, f"P{k}", priority=spec["priority"], due_at=_due(clock, spec["due"]), **kwargs)
        issues.append(issue)
        edges.update((issues[b].pk, issue.pk) for b in blockers)
        _check([i.pk for i in issues], edges, clock.now)
    ids = [i.pk for i in issues]
    for op in ops:
        kind = op[0]
        if kind == "edge":
            _, s, t, via = op
            source, target = issues[s], issues[t]
            closes = s == t or _reaches(edges, target.pk, source.pk)
            try:
                if via == "blocks":
                    relation_add(actor=agent, source_id=source.identifier, target_id=target.identifier, type="blocks")
                elif via == "blocked_by":
                    relation_add(actor=human, source_id=target.identifier, target_id=source.identifier, type="blocked_by")
                else:
                    issue_update(actor=human, identifier=target.identifier, blocked_by=[source.identifier])
            except ServiceError as exc:
                assert closes, f"refused {exc.code} though no cycle would close"
                assert exc.code == "CYCLE"
            else:
                assert not closes, "a blocks edge that closes a cycle was accepted"
                edges.add((source.pk, target.pk))
        elif kind == "unedge":
            _, s, t = op
            if s != t:
                answer = relation_remove(
                    actor=agent, source_id=issues[s].identifier, target_id=issues[t].identifier, type="blocks"
                )
                assert answer["removed"] == ((issues[s].pk, issues[t].pk) in edges)
                edges.discard((issues[s].pk, issues[t].pk))
        elif kind == "priority":
            issue_update(actor=human, identifier=issues[op[1]].identifier, priority=op[2])
        elif kind == "due":
            issue_update(actor=human, identifier=issues[op[1]].identifier, due_at=_due(clock, op[2]))
        elif kind == "status":
            _set_status(human, issues[op[1]], op[2])
        elif kind == "tick":
            clock.advance(minutes=op[1])
            if op[2] == "escalate":
                sla_escalate(org_id=world.org.pk, now=clock.now)
            else:
                ranks_catch_up(org_id=world.org.pk, now=clock.now)
        _check(ids, edges, clock.now)


# No shrink phase: shrinking a failing scenario ran past the suite's 300 s timeout, which
# then hid it. A failure prints its whole scenario (the notes below) instead.
@hsettings(
    max_examples=60,
    deadline=None,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario)
def test_stored_ranks_match_brute_force_after_every_mutation(world, clock, case):
    specs, ops = case
    note(f"issues={specs}")
    note(f"ops={ops}")
    # Each example runs in a savepoint rolled back at its end: examples stay independent.
    with transaction.atomic():
        _run(world, clock, specs, ops)
        transaction.set_rollback(True)
