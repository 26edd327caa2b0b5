"""Review (SPEC §3): submit, who may review, promote, send back."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.issues.models import Activity, Claim, Issue
from apps.issues.services import comment_create, comment_retract, issue_update
from apps.leases import services as leases
from apps.orgs.models import Membership
from apps.orgs.services import actor_for_human, agent_key_authenticate, session_key_mint
from tests.conftest import make_agent, new_issue


def refused(unchanged, code, call, **details) -> ServiceError:
    with unchanged(), pytest.raises(ServiceError) as caught:
        call()
    assert caught.value.code == code, caught.value
    for name, value in details.items():
        assert caught.value.details.get(name) == value, caught.value.details
    return caught.value


def row() -> Issue:
    return Issue.objects.get(number=1, project__prefix="ACME", org__slug__startswith="acme")


def claimed_with_handoff(w, *, assignee="member", note="done: see PR #7"):
    """ACME-1 assigned to the member (the reviewer), held by the owner's agent with a checkpoint."""
    new_issue(w.a, "Implement export", assignee=w.member.email if assignee == "member" else assignee)
    token = leases.claim_issue(actor=w.a, identifier="ACME-1")["claimToken"]
    if note:
        leases.checkpoint(actor=w.a, identifier="ACME-1", note=note, claim_token=token)
    return token


def submitted(w):
    token = claimed_with_handoff(w)
    issue_update(actor=w.a, identifier="ACME-1", status="review", claim_token=token)
    return token


# --- submitting ------------------------------------------------------------------------


def test_submit_for_review_frees_the_authors_lease(world, clock):
    token = claimed_with_handoff(world)
    issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token)
    issue = row()
    assert (issue.status, issue.lease_claim_id, issue.lease_expires_at) == ("review", None, None)
    assert (issue.submitted_by_id, issue.review_requested_at) == (world.owner.pk, clock.now)
    assert issue.checkpoint.note == "done: see PR #7"  # the handoff survives into review
    assert Claim.objects.get().end_reason == "submitted"
    entry = Activity.objects.filter(issue_id=issue.pk).order_by("-seq").first()
    assert entry.verb == "review_requested"
    assert entry.changes == {"status": ["doing", "review"], "claim": ["held", None]}
    # and the author's old token no longer writes
    with pytest.raises(ServiceError) as caught:
        leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token)
    assert caught.value.code == "CLAIM_LOST"


def test_submit_needs_a_claim(world, unchanged):
    new_issue(world.a, "T", assignee=world.member.email)
    refused(unchanged, "CLAIM_REQUIRED", lambda: issue_update(actor=world.a, identifier="ACME-1", status="review"))


@pytest.mark.parametrize("assignee", [None, "me"])
def test_submit_needs_a_reviewer_other_than_the_author(world, unchanged, assignee):
    token = claimed_with_handoff(world, assignee=assignee)
    err = refused(
        unchanged,
        "REVIEWER_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token),
    )
    assert err.as_dict()["tellHuman"] == "Assign a reviewer to ACME-1."
    assert err.http_status == 422


def test_submit_needs_an_active_reviewer(world, unchanged):
    token = claimed_with_handoff(world)
    Membership.objects.filter(org=world.org, user=world.member).update(status=Membership.Status.SUSPENDED)
    refused(
        unchanged,
        "REVIEWER_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token),
    )


def test_submit_needs_a_handoff(world, unchanged):
    token = claimed_with_handoff(world, note=None)
    refused(
        unchanged,
        "HANDOFF_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token),
    )


def test_submit_with_the_reviewer_assigned_in_the_same_call(world):
    token = claimed_with_handoff(world, assignee=None)
    issue_update(actor=world.a, identifier="ACME-1", status="review", assignee=world.member.email, claim_token=token)
    assert (row().status, row().assignee_id) == ("review", world.member.pk)


def test_submit_needs_acceptance_evidence(world, unchanged):
    new_issue(world.a, "T", assignee=world.member.email, acceptance=["tests pass"])
    token = leases.claim_issue(actor=world.a, identifier="ACME-1")["claimToken"]
    leases.checkpoint(actor=world.a, identifier="ACME-1", note="handoff", claim_token=token)
    refused(
        unchanged,
        "ACCEPTANCE_EVIDENCE_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token),
    )
    issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token, evidence=["ci green"])
    assert row().status == "review"


# --- the author cannot review ----------------------------------------------------------


def test_the_author_cannot_claim_the_review(world, unchanged):
    submitted(world)
    refused(unchanged, "AUTHOR_CANNOT_REVIEW", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1"))
    # not with another key of the same person either
    other_key = make_agent(world.org, world.owner, world.project, runtime="cursor").actor
    refused(unchanged, "AUTHOR_CANNOT_REVIEW", lambda: leases.claim_issue(actor=other_key, identifier="ACME-1"))
    _, raw = session_key_mint(actor=world.a)
    session = agent_key_authenticate(raw)
    err = refused(unchanged, "AUTHOR_CANNOT_REVIEW", lambda: leases.claim_issue(actor=session, identifier="ACME-1"))
    assert err.http_status == 403
    # nor is it handed out by a pull, even across lanes
    assert leases.next_issue(actor=other_key, all_lanes=True)["issue"] is None
    assert leases.next_batch(actor=other_key, all_lanes=True) == {"issues": []}


def test_the_author_cannot_promote_or_send_back(world, unchanged):
    submitted(world)
    human = actor_for_human(user=world.owner, org=world.org)
    comment_create(actor=human, issue="ACME-1", body="looks fine to me")
    for actor in (world.a, human):
        refused(
            unchanged, "AUTHOR_CANNOT_REVIEW", lambda actor=actor: issue_update(actor=actor, identifier="ACME-1", status="done")
        )
        refused(
            unchanged, "AUTHOR_CANNOT_REVIEW", lambda actor=actor: issue_update(actor=actor, identifier="ACME-1", status="todo")
        )


# --- reviewing -------------------------------------------------------------------------


def test_reviewer_claims_and_promotes_to_done(world, clock):
    submitted(world)
    clock.advance(minutes=5)
    claim = leases.next_issue(actor=world.b)
    assert claim["issue"]["identifier"] == "ACME-1"
    assert claim["issue"]["status"] == "review"  # stays in review while held
    assert (claim["resumed"], claim["checkpoint"], claim["checkpointBy"]) == (True, "done: see PR #7", world.owner.email)
    assert leases.check_claim(actor=world.b, identifier="ACME-1")["kind"] == "review"
    issue_update(actor=world.b, identifier="ACME-1", status="done", claim_token=claim["claimToken"])
    issue = row()
    assert (issue.status, issue.closed_at, issue.lease_claim_id, issue.checkpoint_id) == ("done", clock.now, None, None)
    verbs = list(Activity.objects.filter(issue_id=issue.pk).order_by("seq").values_list("verb", flat=True))
    assert verbs == ["created", "claimed", "checkpointed", "review_requested", "review_claimed", "review_approved"]


def test_reviewer_must_hold_the_review_to_promote(world, unchanged):
    submitted(world)
    refused(unchanged, "CLAIM_REQUIRED", lambda: issue_update(actor=world.b, identifier="ACME-1", status="done"))


def test_a_human_reviewer_promotes_from_the_dash(world):
    submitted(world)
    reviewer = actor_for_human(user=world.member, org=world.org)
    issue_update(actor=reviewer, identifier="ACME-1", status="done")
    assert row().status == "done"


def test_send_back_needs_a_comment(world, unchanged):
    submitted(world)
    token = leases.claim_issue(actor=world.b, identifier="ACME-1")["claimToken"]
    refused(
        unchanged,
        "REVIEW_COMMENT_REQUIRED",
        lambda: issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=token),
    )
    # the author's comment does not count
    comment_create(actor=world.a, issue="ACME-1", body="please approve")
    refused(
        unchanged,
        "REVIEW_COMMENT_REQUIRED",
        lambda: issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=token),
    )
    # nor does a retracted one
    mine = comment_create(actor=world.b, issue="ACME-1", body="hmm")
    comment_retract(actor=world.b, comment=str(mine.pk), note="wrong issue")
    refused(
        unchanged,
        "REVIEW_COMMENT_REQUIRED",
        lambda: issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=token),
    )


def test_send_back_after_commenting(world):
    submitted(world)
    token = leases.claim_issue(actor=world.b, identifier="ACME-1")["claimToken"]
    comment_create(actor=world.b, issue="ACME-1", body="Missing the CSV header row")
    issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=token)
    issue = row()
    assert (issue.status, issue.lease_claim_id, issue.submitted_by_id, issue.review_requested_at) == ("todo", None, None, None)
    assert issue.checkpoint.note == "done: see PR #7"
    assert Activity.objects.filter(issue_id=issue.pk).order_by("-seq").first().verb == "review_sent_back"
    # it is work again: anyone may pick it up, including the original author
    assert leases.claim_issue(actor=world.a, identifier="ACME-1")["issue"]["status"] == "doing"


def test_a_comment_from_an_earlier_review_round_does_not_count(world, clock):
    token = submitted(world)
    review = leases.claim_issue(actor=world.b, identifier="ACME-1")["claimToken"]
    comment_create(actor=world.b, issue="ACME-1", body="round 1: fix it")
    issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=review)
    # the author fixes it and submits again
    clock.advance(minutes=1)
    token = leases.claim_issue(actor=world.a, identifier="ACME-1")["claimToken"]
    issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token)
    review = leases.claim_issue(actor=world.b, identifier="ACME-1")["claimToken"]
    with pytest.raises(ServiceError) as caught:
        issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=review)
    assert caught.value.code == "REVIEW_COMMENT_REQUIRED"


@pytest.mark.parametrize("status", ["doing", "blocked"])
def test_a_review_ends_in_done_or_todo(world, unchanged, status):
    submitted(world)
    token = leases.claim_issue(actor=world.b, identifier="ACME-1")["claimToken"]
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.b, identifier="ACME-1", status=status, claim_token=token),
        field="status",
    )


def test_a_released_review_stays_in_review(world):
    submitted(world)
    token = leases.claim_issue(actor=world.b, identifier="ACME-1")["claimToken"]
    assert leases.release_issue(actor=world.b, identifier="ACME-1", claim_token=token)["status"] == "review"
    assert leases.next_issue(actor=world.b)["issue"]["status"] == "review"


def test_an_expired_review_claim_stays_in_review(world, clock):
    submitted(world)
    leases.claim_issue(actor=world.b, identifier="ACME-1")
    clock.advance(minutes=31)
    assert leases.reclaim_expired() == 1
    issue = row()
    assert (issue.status, issue.reclaim_count, issue.lease_claim_id) == ("review", 1, None)
    reviewer_two = make_agent(world.org, world.member, world.project, runtime="ci").actor
    claim = leases.next_issue(actor=reviewer_two)
    assert (claim["issue"]["status"], claim["reclaimCount"]) == ("review", 1)


def test_only_the_reviewer_writes_to_a_held_review(world, unchanged):
    submitted(world)
    leases.claim_issue(actor=world.b, identifier="ACME-1")
    refused(
        unchanged,
        "CLAIM_MISMATCH",
        lambda: issue_update(actor=world.a, identifier="ACME-1", priority=1),
        reason="holder-only-writes",
    )
    second_key = make_agent(world.org, world.member, world.project, runtime="ci").actor
    refused(unchanged, "HELD", lambda: leases.claim_issue(actor=second_key, identifier="ACME-1"))
