"""Refusals say what is actually wrong."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.issues.models import Activity, Issue
from apps.issues.services import issue_update
from apps.leases.services import claim_issue
from tests.conftest import new_issue


def test_a_holder_with_a_wrong_token_is_told_the_token_is_wrong(world):
    issue = new_issue(world.a, "Held")
    claim_issue(actor=world.a, identifier=issue.identifier)
    before = Activity.objects.count()
    with pytest.raises(ServiceError) as mine:
        issue_update(actor=world.a, identifier=issue.identifier, title="x", claim_token="rtclm_not-mine")
    assert mine.value.code == "CLAIM_MISMATCH"
    assert mine.value.details["reason"] == "wrong-claim-token"
    assert "not the one for your claim" in mine.value.message and "another agent" not in mine.value.message
    # someone else still hears that another agent holds it
    with pytest.raises(ServiceError) as theirs:
        issue_update(actor=world.b, identifier=issue.identifier, title="x", claim_token="rtclm_not-mine")
    assert "held by another agent" in theirs.value.message
    assert Activity.objects.count() == before and Issue.objects.get(pk=issue.pk).title == "Held"


def test_missing_evidence_counts_criteria_from_one(world):
    issue = new_issue(world.a, "Criteria", acceptance=["builds", "tests pass", "docs"])
    claim = claim_issue(actor=world.a, identifier=issue.identifier)
    with pytest.raises(ServiceError) as refused:
        issue_update(actor=world.a, identifier=issue.identifier, status="done", evidence=["ok"], claim_token=claim["claimToken"])
    assert refused.value.code == "ACCEPTANCE_EVIDENCE_REQUIRED"
    assert refused.value.message.endswith("missing for criteria 2, 3.")
    assert [m["number"] for m in refused.value.details["missing"]] == [2, 3]
    assert Issue.objects.get(pk=issue.pk).status != "done"
