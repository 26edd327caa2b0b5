"""Claims and leases (SPEC §4): the claim answer, renewal, release, resume, expiry, fencing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apps.core.errors import ServiceError
from apps.core.formats import iso
from apps.issues.fencing import token_hash
from apps.issues.models import Activity, Claim, Issue
from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.leases.revocation import agent_key_revoke
from apps.orgs.models import AgentKey, Org
from apps.orgs.services import agent_key_authenticate, session_key_mint
from tests.conftest import new_issue

LEASE = timedelta(minutes=30)


def refused(unchanged, code, call, **details) -> ServiceError:
    with unchanged(), pytest.raises(ServiceError) as caught:
        call()
    assert caught.value.code == code, caught.value
    for name, value in details.items():
        assert caught.value.details.get(name) == value, caught.value.details
    return caught.value


def row(identifier="ACME-1") -> Issue:
    prefix, number = identifier.split("-")
    return Issue.objects.get(project__prefix=prefix, number=int(number))


def verbs(identifier="ACME-1") -> list[str]:
    return list(Activity.objects.filter(issue_id=row(identifier).pk).order_by("seq").values_list("verb", flat=True))


# --- the claim answer ------------------------------------------------------------------


def test_claim_answer(world, clock):
    new_issue(world.a, "Fix the login bug!", priority=2)
    claim = leases.next_issue(actor=world.a)
    assert set(claim) == {
        "issue",
        "claimToken",
        "claimExpiresAt",
        "branch",
        "resumed",
        "checkpoint",
        "handoff",
        "checkpointBy",
        "reclaimCount",
    }
    assert claim["claimToken"].startswith("rtclm_") and len(claim["claimToken"]) > 40
    assert claim["claimExpiresAt"] == iso(clock.now + LEASE)
    assert claim["branch"] == "acme-1/fix-the-login-bug"
    assert (claim["resumed"], claim["checkpoint"], claim["checkpointBy"], claim["reclaimCount"]) == (False, None, None, 0)
    assert claim["issue"]["status"] == "doing"
    assert claim["issue"]["claim"] == {"heldBy": world.owner.email, "expiresAt": iso(clock.now + LEASE), "youHold": True}
    # the token is stored only as its hash
    stored = Claim.objects.get()
    assert stored.token_hash == token_hash(claim["claimToken"]) != claim["claimToken"]
    assert (stored.kind, stored.key_id, stored.principal_id) == ("work", world.a.key_id, world.owner.pk)
    assert verbs() == ["created", "claimed"]


def test_branch_of_an_untitled_slug(world):
    new_issue(world.a, "???")
    assert leases.next_issue(actor=world.a)["branch"] == "acme-1/work"


def test_lease_ttl_is_a_per_org_setting(world, clock):
    Org.objects.filter(pk=world.org.pk).update(lease_ttl_seconds=120)
    actor = agent_key_authenticate(world.owner_agent.raw)
    new_issue(actor, "T")
    assert leases.next_issue(actor=actor)["claimExpiresAt"] == iso(clock.now + timedelta(seconds=120))


def test_claims_of_one_key_are_distinct(world):
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    first, second = leases.next_issue(actor=world.a), leases.next_issue(actor=world.a)
    assert first["claimToken"] != second["claimToken"]


# --- renewal ---------------------------------------------------------------------------


def test_heartbeat_renews(world, clock, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(minutes=20)
    assert leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token) == {
        "identifier": "ACME-1",
        "claimExpiresAt": iso(clock.now + LEASE),
    }
    assert row().lease_expires_at == clock.now + LEASE
    assert Claim.objects.get().expires_at == clock.now + LEASE
    # 25 more minutes: still alive thanks to the heartbeat
    clock.advance(minutes=25)
    assert leases.next_issue(actor=world.b)["issue"] is None


def test_checkpoint_renews_and_is_the_latest_handoff(world, clock):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(minutes=29)
    assert leases.checkpoint(actor=world.a, identifier="ACME-1", note="step 1 done", claim_token=token) == {
        "identifier": "ACME-1",
        "checkpoint": "step 1 done",
        "handoff": None,
        "claimExpiresAt": iso(clock.now + LEASE),
    }
    leases.checkpoint(actor=world.a, identifier="ACME-1", note="step 2 done", claim_token=token)
    assert row().checkpoint.note == "step 2 done"
    assert verbs() == ["created", "claimed", "checkpointed", "checkpointed"]


def test_an_edit_does_not_renew(world, clock):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(minutes=20)
    issue_update(actor=world.a, identifier="ACME-1", title="Renamed", claim_token=token)
    assert row().lease_expires_at == clock.now - timedelta(minutes=20) + LEASE


def test_checkpoint_note_is_required(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: leases.checkpoint(actor=world.a, identifier="ACME-1", note="  ", claim_token=token),
        field="note",
    )


# --- release ---------------------------------------------------------------------------


def test_release_frees_and_keeps_the_checkpoint(world):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    leases.checkpoint(actor=world.a, identifier="ACME-1", note="half way", claim_token=token)
    assert leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token) == {
        "identifier": "ACME-1",
        "status": "todo",
        "released": True,
    }
    issue = row()
    assert (issue.status, issue.lease_claim_id, issue.lease_expires_at) == ("todo", None, None)
    assert issue.checkpoint.note == "half way"
    assert Claim.objects.get().end_reason == "released"
    # the next holder resumes from it
    claim = leases.next_issue(actor=world.b)
    assert (claim["resumed"], claim["checkpoint"], claim["checkpointBy"], claim["reclaimCount"]) == (
        True,
        "half way",
        world.owner.email,
        0,
    )


def test_release_with_a_note_writes_the_checkpoint(world):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token, note="stopped at step 3")
    assert row().checkpoint.note == "stopped at step 3"
    assert verbs() == ["created", "claimed", "checkpointed", "released"]


def test_a_released_token_is_lost(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token)
    refused(unchanged, "CLAIM_LOST", lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token))
    refused(unchanged, "CLAIM_LOST", lambda: leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token))


# --- resume door -----------------------------------------------------------------------


def test_resume_with_own_live_token_rebinds_to_a_session_key(world, clock):
    new_issue(world.a, "T")
    first = leases.next_issue(actor=world.a)
    # after a restart the agent comes back on a fresh session key of the same person
    key, raw = session_key_mint(actor=world.a)
    session = agent_key_authenticate(raw)
    assert key.parent_id == world.a.key_id and session.principal_id == world.owner.pk
    clock.advance(minutes=10)
    again = leases.claim_issue(actor=session, identifier="ACME-1", claim_token=first["claimToken"])
    assert again["claimToken"] == first["claimToken"]
    assert again["claimExpiresAt"] == iso(clock.now + LEASE)
    assert again["issue"]["claim"]["youHold"] is True
    claim = Claim.objects.get()
    assert (claim.key_id, claim.ended_at) == (key.pk, None)
    assert row().lease_claim_id == claim.pk
    assert leases.check_claim(actor=session, identifier="ACME-1")["youHold"] is True
    assert leases.check_claim(actor=world.a, identifier="ACME-1")["youHold"] is False
    assert verbs()[-1] == "claim_rebound"
    # the token keeps working for the session
    leases.heartbeat(actor=session, identifier="ACME-1", claim_token=first["claimToken"])


def test_after_a_rebind_the_old_session_is_superseded(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    _, raw = session_key_mint(actor=world.a)
    session = agent_key_authenticate(raw)
    leases.claim_issue(actor=session, identifier="ACME-1", claim_token=token)

    refused(unchanged, "CLAIM_LOST", lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token))
    refused(
        unchanged, "CLAIM_LOST", lambda: leases.checkpoint(actor=world.a, identifier="ACME-1", note="late", claim_token=token)
    )
    refused(unchanged, "CLAIM_LOST", lambda: leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=token))
    # the old session can take it back through the same door
    back = leases.claim_issue(actor=world.a, identifier="ACME-1", claim_token=token)
    assert back["issue"]["claim"]["youHold"] is True


def test_resume_with_another_principals_token_is_a_mismatch(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    refused(
        unchanged,
        "CLAIM_MISMATCH",
        lambda: leases.claim_issue(actor=world.b, identifier="ACME-1", claim_token=token),
        reason="holder-only-writes",
    )


def test_resume_with_an_expired_token_is_lost(world, clock, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(minutes=31)
    refused(unchanged, "CLAIM_LOST", lambda: leases.claim_issue(actor=world.a, identifier="ACME-1", claim_token=token))
    # a plain claim (no token) takes it afresh
    again = leases.claim_issue(actor=world.a, identifier="ACME-1")
    assert again["claimToken"] != token and again["reclaimCount"] == 1


# --- expiry and reclaim ----------------------------------------------------------------


def test_an_expired_lease_is_free_at_once_and_the_next_holder_resumes(world, clock):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    leases.checkpoint(actor=world.a, identifier="ACME-1", note="tests written, impl next", claim_token=token)
    # when the lease runs out (no periodic job has run)
    clock.advance(minutes=30, seconds=1)
    claim = leases.next_issue(actor=world.b)
    # then the next agent is handed it, resuming from the checkpoint
    assert claim["issue"]["identifier"] == "ACME-1"
    assert (claim["resumed"], claim["checkpoint"], claim["checkpointBy"], claim["reclaimCount"]) == (
        True,
        "tests written, impl next",
        world.owner.email,
        1,
    )
    assert claim["issue"]["reclaimCount"] == 1
    assert claim["issue"]["status"] == "doing"
    old, new = Claim.objects.order_by("pk")
    assert (old.end_reason, old.ended_at) == ("expired", clock.now)
    assert (new.principal_id, new.ended_at) == (world.member.pk, None)
    assert verbs() == ["created", "claimed", "checkpointed", "reclaimed", "claimed"]
    reclaimed = Activity.objects.get(verb="reclaimed")
    assert reclaimed.changes == {"reclaimCount": [0, 1], "claim": ["expired", None], "status": ["doing", "todo"]}


def test_the_lease_ends_exactly_at_expiry(world, clock):
    new_issue(world.a, "T")
    leases.next_issue(actor=world.a)
    clock.advance(minutes=30, microseconds=-1)
    assert leases.next_issue(actor=world.b)["issue"] is None
    clock.now += timedelta(microseconds=1)
    assert leases.next_issue(actor=world.b)["issue"]["identifier"] == "ACME-1"


def test_the_superseded_holders_writes_are_lost(world, clock, unchanged):
    new_issue(world.a, "T", acceptance=None)
    old = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(minutes=31)
    leases.next_issue(actor=world.b)
    for call in (
        lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=old),
        lambda: leases.checkpoint(actor=world.a, identifier="ACME-1", note="late", claim_token=old),
        lambda: leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=old),
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=old),
        lambda: issue_update(actor=world.a, identifier="ACME-1", title="late edit", claim_token=old),
    ):
        err = refused(unchanged, "CLAIM_LOST", call, reclaimCount=1)
        assert err.http_status == 409


def test_an_expired_holders_writes_are_lost_even_before_anyone_reclaims(world, clock, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(minutes=31)
    refused(unchanged, "CLAIM_LOST", lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token))
    refused(unchanged, "CLAIM_LOST", lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token))


def test_another_principals_writes_are_a_mismatch(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    for call in (
        lambda: leases.heartbeat(actor=world.b, identifier="ACME-1", claim_token=token),
        lambda: leases.heartbeat(actor=world.b, identifier="ACME-1", claim_token=""),
        lambda: leases.heartbeat(actor=world.b, identifier="ACME-1", claim_token="rtclm_forged"),
        lambda: leases.checkpoint(actor=world.b, identifier="ACME-1", note="mine", claim_token=token),
        lambda: leases.release_issue(actor=world.b, identifier="ACME-1", claim_token=token),
        lambda: issue_update(actor=world.b, identifier="ACME-1", status="done", claim_token=token),
        lambda: issue_update(actor=world.b, identifier="ACME-1", status="done"),
        lambda: issue_update(actor=world.b, identifier="ACME-1", priority=1),
    ):
        err = refused(unchanged, "CLAIM_MISMATCH", call, reason="holder-only-writes")
        assert err.http_status == 403


def test_finishing_by_an_agent_without_a_claim(world, unchanged):
    new_issue(world.a, "T")
    refused(unchanged, "CLAIM_REQUIRED", lambda: issue_update(actor=world.a, identifier="ACME-1", status="done"))
    refused(unchanged, "CLAIM_REQUIRED", lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=""))
    refused(
        unchanged, "CLAIM_REQUIRED", lambda: leases.checkpoint(actor=world.a, identifier="ACME-1", note="n", claim_token=None)
    )


def test_finishing_ends_the_claim_and_clears_the_checkpoint(world, clock):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    leases.checkpoint(actor=world.a, identifier="ACME-1", note="done soon", claim_token=token)
    issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token)
    issue = row()
    assert (issue.status, issue.closed_at, issue.checkpoint_id, issue.lease_claim_id) == ("done", clock.now, None, None)
    assert Claim.objects.get().end_reason == "finished"
    assert verbs()[-1] == "finished"


# --- acceptance evidence ---------------------------------------------------------------

CRITERIA = ["tests pass", "docs updated"]


def test_acceptance_evidence_is_required(world, unchanged):
    new_issue(world.a, "T", acceptance=CRITERIA)
    token = leases.next_issue(actor=world.a)["claimToken"]
    err = refused(
        unchanged,
        "ACCEPTANCE_EVIDENCE_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token),
    )
    assert err.details["missing"] == [
        {"index": 0, "number": 1, "criterion": "tests pass"},
        {"index": 1, "number": 2, "criterion": "docs updated"},
    ]
    assert err.http_status == 422
    err = refused(
        unchanged,
        "ACCEPTANCE_EVIDENCE_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token, evidence=["ci green"]),
    )
    assert err.details["missing"] == [{"index": 1, "number": 2, "criterion": "docs updated"}]
    err = refused(
        unchanged,
        "ACCEPTANCE_EVIDENCE_REQUIRED",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token, evidence={"1": "README"}),
    )
    assert err.details["missing"] == [{"index": 0, "number": 1, "criterion": "tests pass"}]


def test_acceptance_evidence_as_a_list(world):
    new_issue(world.a, "T", acceptance=CRITERIA)
    token = leases.next_issue(actor=world.a)["claimToken"]
    issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token, evidence=["ci green", "README"])
    issue = row()
    assert (issue.status, issue.evidence) == ("done", ["ci green", "README"])


def test_acceptance_evidence_by_index_across_calls(world):
    new_issue(world.a, "T", acceptance=CRITERIA)
    token = leases.next_issue(actor=world.a)["claimToken"]
    issue_update(actor=world.a, identifier="ACME-1", claim_token=token, evidence={0: "ci green", "1": "README"})
    issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token)
    assert (row().status, row().evidence) == ("done", ["ci green", "README"])


@pytest.mark.parametrize("evidence", [["a", "b", "c"], {"2": "x"}, {"zero": "x"}, {"0": 5}, [""], "  "])
def test_malformed_evidence_is_refused(world, unchanged, evidence):
    new_issue(world.a, "T", acceptance=CRITERIA)
    token = leases.next_issue(actor=world.a)["claimToken"]
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token, evidence=evidence),
        field="evidence",
    )


def test_evidence_without_criteria_is_refused(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier="ACME-1", claim_token=token, evidence=["x"]),
        field="evidence",
    )


# --- the reclaim job -------------------------------------------------------------------


def test_reclaim_expired_job_is_idempotent(world, clock):
    for n in range(3):
        new_issue(world.a, f"T{n}")
    leases.next_issue(actor=world.a)
    leases.next_issue(actor=world.a)
    clock.advance(minutes=20)
    leases.next_issue(actor=world.a)  # ACME-3, still live after the next 15 minutes
    clock.advance(minutes=15)
    assert leases.reclaim_expired() == 2
    assert list(Issue.objects.order_by("number").values_list("status", "reclaim_count", "lease_claim_id")) == [
        ("todo", 1, None),
        ("todo", 1, None),
        ("doing", 0, row("ACME-3").lease_claim_id),
    ]
    assert row("ACME-3").lease_claim_id is not None
    receipts = Activity.objects.count()
    # run again: nothing more to do
    assert leases.reclaim_expired() == 0
    assert Activity.objects.count() == receipts
    assert list(Claim.objects.order_by("pk").values_list("end_reason", flat=True)) == ["expired", "expired", ""]
    # the system, not a person, signed the receipts
    assert set(Activity.objects.filter(verb="reclaimed").values_list("runtime", "principal_id")) == {("system", None)}


def test_reclaimed_issue_is_dispatched_again_with_its_count(world, clock):
    new_issue(world.a, "T")
    leases.next_issue(actor=world.a)
    clock.advance(hours=1)
    leases.reclaim_expired()
    claim = leases.next_issue(actor=world.b)
    assert (claim["issue"]["identifier"], claim["reclaimCount"]) == ("ACME-1", 1)
    assert verbs() == ["created", "claimed", "reclaimed", "claimed"]


# --- revoked keys ----------------------------------------------------------------------


def test_a_revoked_key_is_unauthorized_and_its_claims_end(world, unchanged):
    new_issue(world.a, "T")
    new_issue(world.a, "U")
    token = leases.next_issue(actor=world.a)["claimToken"]
    _, session_raw = session_key_mint(actor=world.a)
    session = agent_key_authenticate(session_raw)
    leases.next_issue(actor=session)
    # when the key is revoked
    agent_key_revoke(key=AgentKey.objects.get(pk=world.a.key_id))
    # then neither it nor its session keys authenticate
    for raw in (world.owner_agent.raw, session_raw):
        with pytest.raises(ServiceError) as caught:
            agent_key_authenticate(raw)
        assert caught.value.code == "UNAUTHORIZED"
    # and their claims have ended: the issues are free at once
    assert list(Claim.objects.values_list("end_reason", flat=True)) == ["revoked", "revoked"]
    assert list(Issue.objects.order_by("number").values_list("status", "lease_claim_id")) == [("todo", None), ("todo", None)]
    refused(unchanged, "CLAIM_LOST", lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token))
    assert leases.next_issue(actor=world.b)["issue"]["identifier"] == "ACME-1"


@pytest.mark.parametrize("raw", ["", "nope", "rtsc_deadbeef_" + "x" * 43])
def test_unknown_keys_are_unauthorized(db, raw):
    with pytest.raises(ServiceError) as caught:
        agent_key_authenticate(raw)
    assert caught.value.code == "UNAUTHORIZED"


# --- tenancy ---------------------------------------------------------------------------


def test_lease_writes_on_another_orgs_issue_are_not_found(world, unchanged):
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    for call in (
        lambda: leases.heartbeat(actor=world.x, identifier="ACME-1", claim_token=token),
        lambda: leases.checkpoint(actor=world.x, identifier="ACME-1", note="x", claim_token=token),
        lambda: leases.release_issue(actor=world.x, identifier="ACME-1", claim_token=token),
        lambda: leases.claim_issue(actor=world.x, identifier="ACME-1", claim_token=token),
    ):
        refused(unchanged, "NOT_FOUND", call)


# --- a repeated finish ----------------------------------------------------------------


def test_a_repeated_finish_answers_the_finished_issue(world, unchanged):
    """A retry after a lost answer: the holder's own finish, again, changes nothing."""
    new_issue(world.a, "T")
    token = leases.next_issue(actor=world.a)["claimToken"]
    issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token)
    with unchanged():  # no receipt, no ledger entry, no field
        again = issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=token)
    assert again.status == "done"
    assert verbs().count("finished") == 1
    # the token is still over for everything else
    refused(unchanged, "CLAIM_LOST", lambda: leases.heartbeat(actor=world.a, identifier="ACME-1", claim_token=token))


def test_a_lapsed_token_stays_lost_after_another_agent_finished(world, unchanged, clock):
    new_issue(world.a, "T")
    lapsed = leases.next_issue(actor=world.a)["claimToken"]
    clock.advance(hours=1)  # the lease lapses; the member's agent takes over and finishes
    took = leases.next_issue(actor=world.b)
    assert took["resumed"] is False and took["reclaimCount"] == 1
    issue_update(actor=world.b, identifier="ACME-1", status="done", claim_token=took["claimToken"])
    refused(unchanged, "CLAIM_LOST", lambda: issue_update(actor=world.a, identifier="ACME-1", status="done", claim_token=lapsed))
