"""The handoff loop (SPEC §5): structured checkpoints, tellHuman/askHuman on refusals only a
person can fix, what unblocks an empty queue, and acceptance checks a machine verifies."""

from __future__ import annotations

import pytest
from django.test import override_settings

from apps.core.errors import ServiceError
from apps.issues.models import Issue
from apps.issues.services import issue_create, issue_update
from apps.issues.shapes import issue_shape
from apps.leases import services as leases
from apps.orgs.models import Org
from apps.orgs.services import actor_for_human
from tests.conftest import new_issue


def refused(unchanged, code, call) -> ServiceError:
    with unchanged(), pytest.raises(ServiceError) as caught:
        call()
    assert caught.value.code == code, caught.value
    return caught.value


def claim_of(actor, identifier):
    return leases.claim_issue(actor=actor, identifier=identifier)["claimToken"]


# --- structured checkpoints ------------------------------------------------------------


def test_structured_checkpoint_is_kept_as_such_and_shown_on_resume(world):
    new_issue(world.a, "Port the parser")
    token = claim_of(world.a, "ACME-1")
    note = {"done": "lexer ported", "next": "port the grammar", "gotchas": ["tabs are significant"], "branch": "acme-1/port"}
    answer = leases.checkpoint(actor=world.a, identifier="ACME-1", note=note, claim_token=token)
    handoff = {"done": "lexer ported", "next": "port the grammar", "gotchas": "- tabs are significant", "branch": "acme-1/port"}
    assert answer["handoff"] == handoff
    assert (
        answer["checkpoint"] == "Done: lexer ported\nNext: port the grammar\nGotchas: - tabs are significant\nBranch: acme-1/port"
    )
    leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token)
    # the next holder, in another runtime, resumes from the structured handoff
    resumed = leases.claim_issue(actor=world.b, identifier="ACME-1")
    assert (resumed["resumed"], resumed["handoff"], resumed["checkpointBy"]) == (True, handoff, world.owner.email)
    assert resumed["issue"]["handoff"] == handoff


def test_free_text_checkpoint_still_accepted(world):
    new_issue(world.a, "T")
    token = claim_of(world.a, "ACME-1")
    answer = leases.checkpoint(actor=world.a, identifier="ACME-1", note="half done", claim_token=token)
    assert (answer["checkpoint"], answer["handoff"]) == ("half done", None)


@pytest.mark.parametrize(
    "note",
    [{"done": "x", "mood": "good"}, {"done": "", "next": None}, {"done": 3}, 42, ""],
)
def test_bad_structured_checkpoint_is_refused(world, unchanged, note):
    new_issue(world.a, "T")
    token = claim_of(world.a, "ACME-1")
    err = refused(
        unchanged, "INVALID_ARGUMENT", lambda: leases.checkpoint(actor=world.a, identifier="ACME-1", note=note, claim_token=token)
    )
    assert err.details["field"] == "note"


def test_release_note_may_be_structured(world):
    new_issue(world.a, "T")
    token = claim_of(world.a, "ACME-1")
    leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token, note={"next": "write the tests"})
    issue = Issue.objects.with_people().get(project=world.project, number=1)
    assert issue_shape(issue, actor=world.a)["handoff"] == {
        "done": None,
        "next": "write the tests",
        "gotchas": None,
        "branch": None,
    }


# --- tellHuman / askHuman ------------------------------------------------------------------


def test_awaiting_triage_tells_and_asks_a_human(world, unchanged):
    issue_create(actor=world.a, title="from github", work=True, no_dependency="external", awaiting_triage=True)
    err = refused(unchanged, "AWAITING_TRIAGE", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1"))
    assert err.as_dict()["tellHuman"] == "Triage ACME-1 in the Dash."
    assert (
        err.as_dict()["askHuman"]
        == "ACME-1 came in from outside; can you accept or reject it in the Dash so it can be worked on?"
    )


@override_settings(RETASC_BILLING_ENFORCE=True)
def test_billing_tells_and_asks_a_human(world, unchanged):
    new_issue(world.a, "T")
    Org.objects.filter(pk=world.org.pk).update(balance_micros=0)
    world.a.org.refresh_from_db()
    err = refused(unchanged, "BILLING_INACTIVE", lambda: leases.next_issue(actor=world.a))
    assert err.as_dict()["tellHuman"] == "Add credit to the org (Dash > Org > Billing) to resume dispatch."
    assert (
        err.as_dict()["askHuman"]
        == "The org is out of credit; can you add some in the Dash (Org > Billing) so I can keep working?"
    )
    Org.objects.filter(pk=world.org.pk).update(balance_micros=10**9, monthly_cap_micros=0)
    err = refused(unchanged, "MONTHLY_CAP_REACHED", lambda: leases.next_issue(actor=world.a))
    assert err.as_dict()["askHuman"] == "The org reached its monthly spend cap; can you raise it in the Dash (Org > Billing)?"


def test_review_by_the_author_tells_a_human_another_person_is_needed(world, unchanged):
    new_issue(world.a, "T", assignee=world.member.email)
    token = claim_of(world.a, "ACME-1")
    leases.checkpoint(actor=world.a, identifier="ACME-1", note={"done": "all", "next": "review"}, claim_token=token)
    issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token)
    err = refused(unchanged, "AUTHOR_CANNOT_REVIEW", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1"))
    body = err.as_dict()
    assert body["tellHuman"] == "ACME-1 needs a review by a person other than its author: ask a teammate to review it."
    assert body["askHuman"] == "Who else can review ACME-1?"


def test_review_without_a_reviewer_asks_who(world, unchanged):
    new_issue(world.a, "T")
    token = claim_of(world.a, "ACME-1")
    leases.checkpoint(actor=world.a, identifier="ACME-1", note="ready", claim_token=token)
    err = refused(
        unchanged,
        "REVIEWER_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="review", claim_token=token),
    )
    assert err.as_dict()["askHuman"] == "Who should review ACME-1? It needs an active person other than me as its assignee."


def test_claim_cap_tells_a_human(world, unchanged):
    Org.objects.filter(pk=world.org.pk).update(claim_cap=1)
    world.a.org.refresh_from_db()
    new_issue(world.a, "one")
    new_issue(world.a, "two")
    claim_of(world.a, "ACME-1")
    err = refused(unchanged, "CLAIM_CAP", lambda: leases.next_issue(actor=world.a))
    assert err.as_dict()["tellHuman"] == (
        "This agent key holds 1 claims, its cap of 1: it must finish or release one, "
        "or an owner raises the claim cap (Dash > Org settings)."
    )
    assert err.as_dict()["askHuman"] == "I hold my cap of 1 claims; shall I release one, or can an owner raise the claim cap?"


def test_empty_queue_says_what_would_unblock_it(world):
    # nothing at all
    assert leases.next_issue(actor=world.a)["tellHuman"] == (
        "The queue is empty: file new work (save_issue, the Dash or a connector) to give agents something to do."
    )
    # only an issue awaiting triage
    issue_create(actor=world.a, title="from github", work=True, no_dependency="external", awaiting_triage=True)
    assert (
        leases.next_issue(actor=world.a)["tellHuman"]
        == "No work is ready for me: 1 issue(s) await triage (accept them in the Dash)."
    )
    # once a person signs it off, it is handed out
    issue_update(actor=actor_for_human(user=world.owner, org=world.org), identifier="ACME-1", awaiting_triage=False)
    assert leases.next_issue(actor=world.a)["issue"]["identifier"] == "ACME-1"


# --- acceptance checks -------------------------------------------------------------------


def _finish(actor, identifier, token):
    return issue_update(actor=actor, identifier=identifier, status="done", claim_token=token)


def test_tests_green_check(world, unchanged):
    new_issue(world.a, "T", acceptance=["docs updated", {"text": "suite passes", "check": "tests_green"}])
    token = claim_of(world.a, "ACME-1")
    issue_update(actor=world.a, identifier="ACME-1", evidence=["README", "2 failed, 10 passed in 3.2s"], claim_token=token)
    err = refused(unchanged, "ACCEPTANCE_EVIDENCE_REQUIRED", lambda: _finish(world.a, "ACME-1", token))
    assert err.message == "The tests_green check of criterion 2 failed: the evidence reports failing tests."
    assert err.details["failedChecks"] == [
        {
            "index": 1,
            "number": 2,
            "criterion": "suite passes",
            "check": "tests_green",
            "reason": "the evidence reports failing tests.",
        }
    ]
    issue_update(actor=world.a, identifier="ACME-1", evidence=["README", "ran it: looks fine"], claim_token=token)
    err = refused(unchanged, "ACCEPTANCE_EVIDENCE_REQUIRED", lambda: _finish(world.a, "ACME-1", token))
    assert "no passing test summary line" in err.message
    issue_update(actor=world.a, identifier="ACME-1", evidence=["README", "===== 12 passed in 3.21s ====="], claim_token=token)
    assert _finish(world.a, "ACME-1", token).status == "done"


@pytest.mark.parametrize(
    "summary",
    [
        "Tests:       5 passed, 5 total",
        "test result: ok. 7 passed; 0 failed; 0 ignored",
        "Ran 4 tests in 0.01s\n\nOK",
        "ok  \texample.com/pkg\t0.12s",
    ],
)
def test_tests_green_knows_common_runners(world, summary):
    new_issue(world.a, "T", acceptance=[{"text": "green", "check": {"type": "tests_green"}}])
    token = claim_of(world.a, "ACME-1")
    issue_update(actor=world.a, identifier="ACME-1", evidence=[summary], claim_token=token)
    assert _finish(world.a, "ACME-1", token).status == "done"


def test_required_fields_check(world, unchanged):
    new_issue(world.a, "T", acceptance=[{"text": "PR opened", "check": {"type": "required_fields", "fields": ["url", "sha"]}}])
    token = claim_of(world.a, "ACME-1")
    issue_update(actor=world.a, identifier="ACME-1", evidence=[{"url": "https://example.test/pr/1"}], claim_token=token)
    err = refused(unchanged, "ACCEPTANCE_EVIDENCE_REQUIRED", lambda: _finish(world.a, "ACME-1", token))
    assert err.message == "The required_fields check of criterion 1 failed: the evidence lacks sha."
    issue_update(actor=world.a, identifier="ACME-1", evidence=["just text"], claim_token=token)
    err = refused(unchanged, "ACCEPTANCE_EVIDENCE_REQUIRED", lambda: _finish(world.a, "ACME-1", token))
    assert err.message == "The required_fields check of criterion 1 failed: the evidence must be an object with url, sha."
    # an object, or the JSON text of one
    issue_update(
        actor=world.a, identifier="ACME-1", evidence=['{"url": "https://example.test/pr/1", "sha": "abc123"}'], claim_token=token
    )
    assert _finish(world.a, "ACME-1", token).status == "done"


def test_unknown_check_fails_closed(world, unchanged):
    new_issue(world.a, "T", acceptance=[{"text": "deployed", "check": {"type": "canary_healthy"}}])
    token = claim_of(world.a, "ACME-1")
    issue_update(actor=world.a, identifier="ACME-1", evidence=["it is healthy, trust me"], claim_token=token)
    err = refused(unchanged, "ACCEPTANCE_EVIDENCE_REQUIRED", lambda: _finish(world.a, "ACME-1", token))
    assert (
        err.message
        == "The canary_healthy check of criterion 1 failed: the check 'canary_healthy' is unknown to this server, so it cannot pass."
    )


def test_missing_evidence_still_named(world, unchanged):
    new_issue(world.a, "T", acceptance=["a", {"text": "b", "check": "tests_green"}])
    token = claim_of(world.a, "ACME-1")
    err = refused(unchanged, "ACCEPTANCE_EVIDENCE_REQUIRED", lambda: _finish(world.a, "ACME-1", token))
    assert err.details["missing"] == [{"index": 0, "number": 1, "criterion": "a"}, {"index": 1, "number": 2, "criterion": "b"}]


@pytest.mark.parametrize(
    "acceptance",
    [
        [{"text": "x", "check": {"type": "required_fields"}}],
        [{"text": "x", "check": {"type": "required_fields", "fields": []}}],
        [{"text": "", "check": "tests_green"}],
        [{"text": "x", "check": 5}],
        [{"text": "x", "extra": 1}],
    ],
)
def test_bad_criteria_are_refused(world, unchanged, acceptance):
    with unchanged(), pytest.raises(ServiceError) as caught:
        new_issue(world.a, "T", acceptance=acceptance)
    assert (caught.value.code, caught.value.details["field"]) == ("INVALID_ARGUMENT", "acceptance")


def test_criteria_with_checks_are_read_back_as_given(world):
    criteria = ["plain", {"text": "green", "check": {"type": "tests_green"}}]
    new_issue(world.a, "T", acceptance=criteria)
    issue = Issue.objects.with_people().get(project=world.project, number=1)
    assert issue_shape(issue, actor=world.a)["acceptance"] == criteria
