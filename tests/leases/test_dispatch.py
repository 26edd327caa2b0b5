"""Dispatch (SPEC §4): order, inheritance, lanes, refusals, the claim cap and batches."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.issues.models import Claim, Issue, Relation
from apps.issues.services import comment_create, issue_create, issue_update, relation_add
from apps.leases import services as leases
from apps.orgs.models import Org
from apps.orgs.services import agent_key_authenticate
from tests.conftest import make_agent, new_issue


def refused(unchanged, code, call, **details) -> ServiceError:
    with unchanged(), pytest.raises(ServiceError) as caught:
        call()
    assert caught.value.code == code, caught.value
    for name, value in details.items():
        assert caught.value.details.get(name) == value, caught.value.details
    return caught.value


def pulled(answer) -> str | None:
    return answer["issue"]["identifier"] if answer["issue"] else None


def finish(actor, identifier):
    claim = leases.claim_issue(actor=actor, identifier=identifier)
    issue_update(actor=actor, identifier=identifier, status="done", claim_token=claim["claimToken"])


def to_review(w, identifier):
    """The owner's agent does the work and submits it for review by the member."""
    issue_update(actor=w.a, identifier=identifier, assignee=w.member.email)
    claim = leases.claim_issue(actor=w.a, identifier=identifier)
    leases.checkpoint(actor=w.a, identifier=identifier, note="ready for review", claim_token=claim["claimToken"])
    issue_update(actor=w.a, identifier=identifier, status="review", claim_token=claim["claimToken"])


def with_cap(w, cap):
    Org.objects.filter(pk=w.org.pk).update(claim_cap=cap)
    return agent_key_authenticate(w.owner_agent.raw)


def live_claims() -> int:
    return Claim.objects.filter(ended_at__isnull=True).count()


# --- order -----------------------------------------------------------------------------


def test_order_is_effective_rank_then_oldest_created(world, clock):
    # given issues filed a second apart, in scrambled priority
    for title, priority in [("low", 4), ("none", 0), ("medium", 3), ("urgent-old", 1), ("high", 2), ("urgent-new", 1)]:
        new_issue(world.a, title, priority=priority)
        clock.advance(seconds=1)
    # when the agent pulls them one by one
    order = [leases.next_issue(actor=world.a)["issue"]["title"] for _ in range(6)]
    # then urgent comes first, older first among equals, and none sorts last
    assert order == ["urgent-old", "urgent-new", "high", "medium", "low", "none"]
    assert leases.next_issue(actor=world.a)["issue"] is None


def test_equal_rank_is_oldest_first_regardless_of_number(world, clock):
    new_issue(world.a, "first")
    clock.advance(minutes=5)
    second = new_issue(world.a, "second")
    # the second issue is backdated: createdAt decides, not the number
    Issue.objects.filter(pk=second.pk).update(created_at=clock.now.replace(year=2020))
    assert pulled(leases.next_issue(actor=world.a)) == "ACME-2"


def test_a_low_priority_blocker_of_an_urgent_issue_is_dispatched_first(world, clock):
    # given a high issue filed first, then a low blocker of an urgent issue
    new_issue(world.a, "high, older", priority=2)
    clock.advance(seconds=1)
    blocker = new_issue(world.a, "blocker", priority=4)
    new_issue(world.a, "urgent", priority=1, blocked_by=[blocker.identifier])
    # when the agent pulls
    claim = leases.next_issue(actor=world.a)
    # then the blocker comes first, carrying the urgency it unblocks
    assert claim["issue"]["identifier"] == "ACME-2"
    assert (claim["issue"]["priority"], claim["issue"]["effectivePriority"]) == (4, 1)


def test_inheritance_is_transitive_and_follows_edits(world):
    # given C (low) blocks B (none) blocks A (none)
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    new_issue(world.a, "C", priority=4)
    relation_add(actor=world.a, source_id="ACME-2", target_id="ACME-1", type="blocks")
    relation_add(actor=world.a, source_id="ACME-3", target_id="ACME-2", type="blocks")

    def eff():
        return dict(Issue.objects.filter(project=world.project).values_list("number", "effective_rank"))

    assert eff() == {1: 5, 2: 5, 3: 4}
    # when A becomes urgent, the whole chain inherits it
    issue_update(actor=world.a, identifier="ACME-1", priority=1)
    assert eff() == {1: 1, 2: 1, 3: 1}
    # when A is canceled, the blockers fall back to their own rank
    issue_update(actor=world.a, identifier="ACME-1", status="canceled", cancel_reason="not needed")
    assert eff() == {1: 1, 2: 5, 3: 4}
    # when A reopens, the urgency comes back
    issue_update(actor=world.a, identifier="ACME-1", status="todo")
    assert eff() == {1: 1, 2: 1, 3: 1}
    # removing the middle edge cuts C off
    from apps.issues.services import relation_remove

    relation_remove(actor=world.a, source_id="ACME-3", target_id="ACME-2", type="blocks")
    assert eff() == {1: 1, 2: 1, 3: 4}


def test_reviews_sort_ahead_of_todo_at_equal_rank(world, clock):
    # given a high todo filed first and then a piece of work submitted for review
    new_issue(world.a, "high todo", priority=2, assignee=world.member.email)
    clock.advance(seconds=1)
    new_issue(world.a, "to review", priority=4)
    to_review(world, "ACME-2")
    # when the reviewer pulls
    first = leases.next_issue(actor=world.b)
    # then the review (floored at high) comes before the high todo, and stays in review
    assert first["issue"]["identifier"] == "ACME-2"
    assert first["issue"]["status"] == "review"
    assert first["issue"]["effectivePriority"] == 2
    assert Claim.objects.get(pk=Issue.objects.get(number=2, project=world.project).lease_claim_id).kind == "review"
    assert pulled(leases.next_issue(actor=world.b)) == "ACME-1"


def test_an_urgent_todo_sorts_ahead_of_a_review(world, clock):
    new_issue(world.a, "to review")
    to_review(world, "ACME-1")
    clock.advance(seconds=1)
    new_issue(world.a, "urgent", priority=1)
    assert pulled(leases.next_issue(actor=world.b)) == "ACME-2"
    assert pulled(leases.next_issue(actor=world.b)) == "ACME-1"


# --- lanes -----------------------------------------------------------------------------


def test_lanes_own_and_unassigned_never_a_teammates(world, clock):
    new_issue(world.a, "member's", priority=1, assignee=world.member.email)
    clock.advance(seconds=1)
    new_issue(world.a, "mine", priority=3, assignee="me")
    clock.advance(seconds=1)
    new_issue(world.a, "anyone's", priority=4)
    assert pulled(leases.next_issue(actor=world.a)) == "ACME-2"
    assert pulled(leases.next_issue(actor=world.a)) == "ACME-3"
    # then only the teammate's issue is left, and it is not handed out
    assert leases.next_issue(actor=world.a) == {
        "issue": None,
        "ready": 0,
        "otherLanes": 1,
        "blocked": 0,
        "claimed": 2,
        "awaitingTriage": 0,
        "tellHuman": "No work is ready for me: 1 ready issue(s) are in teammates' lanes (unassign them, or let me pull with "
        "allLanes); 2 issue(s) are held by other agents.",
    }
    assert leases.next_batch(actor=world.a) == {"issues": []}
    # the teammate gets it
    assert pulled(leases.next_issue(actor=world.b)) == "ACME-1"


def test_all_lanes_widens_the_pull(world):
    new_issue(world.a, "member's", assignee=world.member.email)
    assert leases.next_issue(actor=world.a)["issue"] is None
    assert [i["identifier"] for i in leases.next_batch(actor=world.a, all_lanes=True)["issues"]] == ["ACME-1"]
    assert pulled(leases.next_issue(actor=world.a, all_lanes=True)) == "ACME-1"


def test_claim_issue_takes_any_lane(world):
    new_issue(world.a, "member's", assignee=world.member.email)
    claim = leases.claim_issue(actor=world.a, identifier="ACME-1")
    assert claim["issue"]["status"] == "doing"
    assert claim["issue"]["assignee"] == world.member.email


def test_empty_pull_counts(world):
    # given: one held, one waiting on it, one flagged blocked, one awaiting triage,
    # one in a teammate's lane, a container and a closed issue
    new_issue(world.a, "held")
    leases.claim_issue(actor=world.b, identifier="ACME-1")
    new_issue(world.a, "waits on held", blocked_by=["ACME-1"])
    new_issue(world.a, "vendor", status="blocked")
    issue_create(actor=world.a, title="from github", work=True, no_dependency="external", awaiting_triage=True)
    new_issue(world.a, "member's", assignee=world.member.email)
    new_issue(world.a, "epic", work=False)
    new_issue(world.a, "closed")
    finish(world.b, "ACME-7")
    # when the owner's agent pulls, then nothing is handed out and the counts say why
    before = live_claims()
    assert leases.next_issue(actor=world.a) == {
        "issue": None,
        "ready": 0,
        "otherLanes": 1,
        "blocked": 2,
        "claimed": 1,
        "awaitingTriage": 1,
        "tellHuman": "No work is ready for me: 1 issue(s) await triage (accept them in the Dash); 1 ready issue(s) are in "
        "teammates' lanes (unassign them, or let me pull with allLanes); 2 issue(s) are blocked (finish their blockers or "
        "clear the blocked flag); 1 issue(s) are held by other agents.",
    }
    assert live_claims() == before


# --- claim_issue refusals --------------------------------------------------------------


def test_awaiting_triage_is_refused(world, unchanged):
    issue_create(actor=world.a, title="from github", work=True, no_dependency="external", awaiting_triage=True)
    assert leases.next_issue(actor=world.a, all_lanes=True)["issue"] is None
    err = refused(unchanged, "AWAITING_TRIAGE", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1"))
    assert err.as_dict()["tellHuman"] == "Triage ACME-1 in the Dash."
    # an agent cannot lift the quarantine itself
    err = refused(unchanged, "FORBIDDEN", lambda: issue_update(actor=world.a, identifier="ACME-1", awaiting_triage=False))
    assert err.as_dict()["tellHuman"] == "Triage ACME-1 in the Dash."
    # once a human signs it off it is dispatched
    from apps.orgs.services import actor_for_human

    issue_update(actor=actor_for_human(user=world.owner, org=world.org), identifier="ACME-1", awaiting_triage=False)
    assert pulled(leases.next_issue(actor=world.a)) == "ACME-1"


def test_an_agent_may_quarantine_but_not_release(world):
    new_issue(world.a, "T")
    issue_update(actor=world.a, identifier="ACME-1", awaiting_triage=False)  # no change: allowed
    issue_update(actor=world.a, identifier="ACME-1", awaiting_triage=True)
    assert Issue.objects.get().awaiting_triage is True


def test_blocked_carries_the_open_blockers(world, unchanged):
    new_issue(world.a, "first blocker")
    new_issue(world.a, "second blocker")
    new_issue(world.a, "done blocker")
    finish(world.a, "ACME-3")
    new_issue(world.a, "waits", blocked_by=["ACME-2", "ACME-1", "ACME-3"])
    leases.claim_issue(actor=world.b, identifier="ACME-2")
    err = refused(unchanged, "BLOCKED", lambda: leases.claim_issue(actor=world.a, identifier="ACME-4"))
    assert err.details["blockers"] == [
        {"identifier": "ACME-1", "status": "todo"},
        {"identifier": "ACME-2", "status": "doing"},
    ]
    assert err.http_status == 409


def test_held_by_another(world, unchanged, clock):
    new_issue(world.a, "T")
    claim = leases.claim_issue(actor=world.b, identifier="ACME-1")
    err = refused(unchanged, "HELD", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1"), heldBy=world.member.email)
    assert err.details["expiresAt"] == Issue.objects.get(pk=Claim.objects.get().issue_id).lease_expires_at.isoformat()
    # even the holder's principal cannot claim it twice
    refused(unchanged, "HELD", lambda: leases.claim_issue(actor=world.b, identifier="ACME-1"))
    assert claim["claimToken"]


@pytest.mark.parametrize("status", ["done", "canceled", "blocked"])
def test_not_eligible_statuses(world, unchanged, status):
    new_issue(world.a, "T")
    if status == "done":
        finish(world.a, "ACME-1")
    else:
        issue_update(actor=world.a, identifier="ACME-1", status=status, cancel_reason="x" if status == "canceled" else None)
    err = refused(
        unchanged, f"NOT_ELIGIBLE:{status}", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1"), status=status
    )
    assert err.http_status == 409


def test_claim_of_another_orgs_issue_is_not_found(world, unchanged):
    new_issue(world.a, "Ours")
    refused(unchanged, "NOT_FOUND", lambda: leases.claim_issue(actor=world.x, identifier="ACME-1"))
    refused(unchanged, "NOT_FOUND", lambda: leases.check_claim(actor=world.x, identifier="ACME-1"))
    assert leases.next_issue(actor=world.x)["issue"] is None
    assert leases.next_batch(actor=world.x, all_lanes=True) == {"issues": []}


def test_claim_cap(world, unchanged):
    actor = with_cap(world, 2)
    for n in range(4):
        new_issue(actor, f"T{n}")
    first = leases.claim_issue(actor=actor, identifier="ACME-1")
    leases.next_issue(actor=actor)
    # at the cap every way to claim is refused
    refused(unchanged, "CLAIM_CAP", lambda: leases.claim_issue(actor=actor, identifier="ACME-3"), held=2, cap=2)
    refused(unchanged, "CLAIM_CAP", lambda: leases.next_issue(actor=actor), held=2, cap=2)
    refused(unchanged, "CLAIM_CAP", lambda: leases.next_batch(actor=actor, n=2, claim=True), held=2, cap=2)
    assert refused(unchanged, "CLAIM_CAP", lambda: leases.next_issue(actor=actor)).http_status == 429
    # the cap is per key: another key of the same person still claims
    other = make_agent(world.org, world.owner, world.project, runtime="cursor").actor
    assert pulled(leases.next_issue(actor=other)) == "ACME-3"
    # releasing one makes room again
    leases.release_issue(actor=actor, identifier="ACME-1", claim_token=first["claimToken"])
    assert pulled(leases.next_issue(actor=actor)) == "ACME-1"


def test_expired_claims_do_not_count_against_the_cap(world, clock):
    actor = with_cap(world, 1)
    new_issue(actor, "T1")
    new_issue(actor, "T2")
    leases.next_issue(actor=actor)
    clock.advance(minutes=31)
    assert pulled(leases.next_issue(actor=actor)) == "ACME-1"  # its own expired claim is free again


# --- next_batch ------------------------------------------------------------------------


def test_next_batch_peek_changes_no_claims(world, clock):
    for n, priority in enumerate([3, 1, 2]):
        new_issue(world.a, f"T{n}", priority=priority)
        clock.advance(seconds=1)
    statuses = list(Issue.objects.order_by("number").values_list("status", "lease_claim_id"))
    answer = leases.next_batch(actor=world.a)
    assert list(answer) == ["issues"]
    assert [i["identifier"] for i in answer["issues"]] == ["ACME-2", "ACME-3", "ACME-1"]
    assert all(i["claim"] is None for i in answer["issues"])
    assert Claim.objects.count() == 0
    assert list(Issue.objects.order_by("number").values_list("status", "lease_claim_id")) == statuses


def test_next_batch_claim_gives_each_its_own_token(world, clock):
    for n in range(4):
        new_issue(world.a, f"T{n}")
        clock.advance(seconds=1)
    answer = leases.next_batch(actor=world.a, n=3, claim=True)
    assert list(answer) == ["claims"]
    assert [c["issue"]["identifier"] for c in answer["claims"]] == ["ACME-1", "ACME-2", "ACME-3"]
    tokens = [c["claimToken"] for c in answer["claims"]]
    assert len(set(tokens)) == 3
    assert all(c["issue"]["status"] == "doing" and c["issue"]["claim"]["youHold"] for c in answer["claims"])
    assert live_claims() == 3
    # each token fences its own issue only
    leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=tokens[0])
    with pytest.raises(ServiceError) as caught:
        leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=tokens[1])
    assert caught.value.code == "CLAIM_MISMATCH"


def test_next_batch_default_is_five(world):
    for n in range(7):
        new_issue(world.a, f"T{n}")
    assert len(leases.next_batch(actor=world.a)["issues"]) == 5


def test_next_batch_claim_stops_at_the_cap(world):
    actor = with_cap(world, 3)
    for n in range(5):
        new_issue(actor, f"T{n}")
    assert len(leases.next_batch(actor=actor, n=5, claim=True)["claims"]) == 3
    assert live_claims() == 3


def test_next_batch_picks_are_independent(world, clock):
    # given, in dispatch order: A, B (blocked by A through a closed middle M),
    # C, D (a duplicate of C), E (related to A: that does not matter)
    new_issue(world.a, "A", priority=1)  # ACME-1
    new_issue(world.a, "M")  # ACME-2
    new_issue(world.a, "B", priority=1)  # ACME-3
    new_issue(world.a, "C", priority=2)  # ACME-4
    new_issue(world.a, "D", priority=2)  # ACME-5
    new_issue(world.a, "E", priority=3)  # ACME-6
    relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="blocks")
    relation_add(actor=world.a, source_id="ACME-2", target_id="ACME-3", type="blocks")
    relation_add(actor=world.a, source_id="ACME-4", target_id="ACME-5", type="duplicate")
    relation_add(actor=world.a, source_id="ACME-6", target_id="ACME-1", type="related")
    # M is closed (a human cancels it), so B is not blocked by anything open
    issue_update(actor=world.a, identifier="ACME-2", status="canceled", cancel_reason="folded into A")
    claim_b = leases.claim_issue(actor=world.b, identifier="ACME-3")
    leases.release_issue(actor=world.b, identifier="ACME-3", claim_token=claim_b["claimToken"])
    # when a batch is planned and claimed
    peek = [i["identifier"] for i in leases.next_batch(actor=world.a, n=5)["issues"]]
    claims = leases.next_batch(actor=world.a, n=5, claim=True)["claims"]
    # then no two picks are connected by a blocks path or a duplicate edge
    assert peek == ["ACME-1", "ACME-4", "ACME-6"]
    assert [c["issue"]["identifier"] for c in claims] == ["ACME-1", "ACME-4", "ACME-6"]
    # and the skipped ones come in the next batch
    assert [i["identifier"] for i in leases.next_batch(actor=world.b, n=5)["issues"]] == ["ACME-3", "ACME-5"]


@pytest.mark.parametrize("n", [0, 26, -1, "x", "", 2.5, True, [3], float("inf"), float("nan")])
def test_next_batch_n_out_of_range_is_refused(world, unchanged, n):
    new_issue(world.a, "T")
    refused(unchanged, "INVALID_ARGUMENT", lambda: leases.next_batch(actor=world.a, n=n), field="n")
    refused(unchanged, "INVALID_ARGUMENT", lambda: leases.next_batch(actor=world.a, n=n, claim=True), field="n")


def test_next_batch_accepts_the_bounds(world):
    new_issue(world.a, "T")
    assert len(leases.next_batch(actor=world.a, n=1)["issues"]) == 1
    assert len(leases.next_batch(actor=world.a, n=25)["issues"]) == 1
    assert len(leases.next_batch(actor=world.a, n="25")["issues"]) == 1


def test_pulls_need_an_agent_key(world, unchanged):
    from apps.orgs.services import actor_for_human

    new_issue(world.a, "T")
    human = actor_for_human(user=world.owner, org=world.org)
    refused(unchanged, "FORBIDDEN", lambda: leases.next_issue(actor=human))
    refused(unchanged, "FORBIDDEN", lambda: leases.claim_issue(actor=human, identifier="ACME-1"))
    refused(unchanged, "FORBIDDEN", lambda: leases.next_batch(actor=human, claim=True))


def test_a_review_comment_does_not_change_dispatch(world):
    new_issue(world.a, "T")
    comment_create(actor=world.b, issue="ACME-1", body="note")
    assert pulled(leases.next_issue(actor=world.a)) == "ACME-1"
    assert Relation.objects.count() == 0
