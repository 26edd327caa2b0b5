"""Relations and dependency blocking (SPEC §3): blocks, blocked_by, related, duplicate, cycles."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.issues.models import Activity, Issue, Relation
from apps.issues.selectors import issue_resolve
from apps.issues.services import comment_create, issue_update, relation_add, relation_remove
from apps.issues.shapes import issue_shape
from apps.leases import services as leases
from tests.conftest import new_issue


def refused(unchanged, code, call, **details) -> ServiceError:
    with unchanged(), pytest.raises(ServiceError) as caught:
        call()
    assert caught.value.code == code, caught.value
    for name, value in details.items():
        assert caught.value.details.get(name) == value, caught.value.details
    return caught.value


def shape(actor, identifier):
    issue = issue_resolve(actor=actor, identifier=identifier)
    return issue_shape(Issue.objects.with_people().get(pk=issue.pk), actor=actor)


def dispatchable(actor) -> list[str]:
    """Identifiers a pull could hand out right now (peek, all lanes, in order)."""
    return [i["identifier"] for i in leases.next_batch(actor=actor, n=25, all_lanes=True)["issues"]]


def finish(actor, identifier):
    claim = leases.claim_issue(actor=actor, identifier=identifier)
    issue_update(actor=actor, identifier=identifier, status="done", claim_token=claim["claimToken"])


def to_review(w, identifier):
    """The owner's agent does the work and submits it for review by the member."""
    issue_update(actor=w.a, identifier=identifier, assignee=w.member.email)
    claim = leases.claim_issue(actor=w.a, identifier=identifier)
    leases.checkpoint(actor=w.a, identifier=identifier, note="ready for review", claim_token=claim["claimToken"])
    issue_update(actor=w.a, identifier=identifier, status="review", claim_token=claim["claimToken"])


# --- kinds -----------------------------------------------------------------------------


def test_blocks_edge_blocks_its_target(world, unchanged):
    a, b = new_issue(world.a, "A"), new_issue(world.a, "B")
    assert relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="blocks") == {
        "source": "ACME-1",
        "target": "ACME-2",
        "type": "blocks",
        "created": True,
    }
    assert shape(world.a, b.identifier)["blockedBy"] == ["ACME-1"]
    assert shape(world.a, b.identifier)["blockedByOpen"] == ["ACME-1"]
    assert shape(world.a, a.identifier)["blocks"] == ["ACME-2"]
    assert dispatchable(world.a) == ["ACME-1"]
    refused(
        unchanged,
        "BLOCKED",
        lambda: leases.claim_issue(actor=world.a, identifier="ACME-2"),
        blockers=[{"identifier": "ACME-1", "status": "todo"}],
    )
    # both ends carry a receipt
    assert Activity.objects.filter(verb="relation_added").count() == 2


def test_blocked_by_is_the_same_edge_seen_from_the_other_end(world):
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    assert relation_add(actor=world.a, source_id="ACME-2", target_id="ACME-1", type="blocked_by") == {
        "source": "ACME-1",
        "target": "ACME-2",
        "type": "blocks",
        "created": True,
    }
    assert list(Relation.objects.values_list("source__number", "target__number", "type")) == [(1, 2, "blocks")]
    # adding it again either way is a no-op
    assert relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="blocks")["created"] is False
    assert Relation.objects.count() == 1


@pytest.mark.parametrize("kind", ["related", "duplicate"])
def test_related_and_duplicate_never_block(world, kind):
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    assert relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type=kind)["created"] is True
    # the same pair in either direction is one relation
    assert relation_add(actor=world.a, source_id="ACME-2", target_id="ACME-1", type=kind)["created"] is False
    assert Relation.objects.filter(type=kind).count() == 1
    assert shape(world.a, "ACME-2")["blockedBy"] == []
    assert leases.claim_issue(actor=world.a, identifier="ACME-2")["issue"]["status"] == "doing"


def test_unknown_relation_type_is_refused(world, unchanged):
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="parent"),
        field="type",
    )


@pytest.mark.parametrize("kind", ["blocks", "blocked_by", "related", "duplicate"])
def test_an_issue_cannot_relate_to_itself(world, unchanged, kind):
    new_issue(world.a, "A")
    refused(unchanged, "CYCLE", lambda: relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-1", type=kind))


def test_relations_to_another_orgs_issue_are_not_found(world, unchanged):
    new_issue(world.a, "Ours")
    new_issue(world.x, "Theirs")
    refused(unchanged, "NOT_FOUND", lambda: relation_add(actor=world.a, source_id="ACME-1", target_id="GLX-1", type="blocks"))
    refused(unchanged, "NOT_FOUND", lambda: relation_add(actor=world.x, source_id="GLX-1", target_id="ACME-1", type="related"))
    refused(unchanged, "NOT_FOUND", lambda: relation_remove(actor=world.x, source_id="ACME-1", target_id="GLX-1", type="blocks"))


# --- cycles ----------------------------------------------------------------------------


def test_two_node_cycle_is_refused(world, unchanged):
    new_issue(world.a, "A")
    new_issue(world.a, "B", blocked_by=["ACME-1"])
    refused(unchanged, "CYCLE", lambda: relation_add(actor=world.a, source_id="ACME-2", target_id="ACME-1", type="blocks"))
    refused(unchanged, "CYCLE", lambda: relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="blocked_by"))


def test_three_node_cycle_is_refused(world, unchanged):
    # given A blocks B blocks C
    new_issue(world.a, "A")
    new_issue(world.a, "B", blocked_by=["ACME-1"])
    new_issue(world.a, "C", blocked_by=["ACME-2"])
    # when C would block A, the loop is refused, whichever end says it
    refused(unchanged, "CYCLE", lambda: relation_add(actor=world.a, source_id="ACME-3", target_id="ACME-1", type="blocks"))
    refused(unchanged, "CYCLE", lambda: relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-3", type="blocked_by"))
    refused(unchanged, "CYCLE", lambda: issue_update(actor=world.a, identifier="ACME-1", blocked_by=["ACME-3"]))


def test_a_cycle_through_a_closed_issue_is_still_refused(world, unchanged):
    new_issue(world.a, "A")
    new_issue(world.a, "B", blocked_by=["ACME-1"])
    finish(world.a, "ACME-1")
    refused(unchanged, "CYCLE", lambda: relation_add(actor=world.a, source_id="ACME-2", target_id="ACME-1", type="blocks"))


def test_a_diamond_is_not_a_cycle(world):
    new_issue(world.a, "Root")
    new_issue(world.a, "Left", blocked_by=["ACME-1"])
    new_issue(world.a, "Right", blocked_by=["ACME-1"])
    new_issue(world.a, "Join", blocked_by=["ACME-2", "ACME-3"])
    assert relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-4", type="blocks")["created"] is True


# --- what unblocks ---------------------------------------------------------------------


def test_only_done_or_canceled_unblock(world):
    new_issue(world.a, "Blocker")
    new_issue(world.a, "Waiting", blocked_by=["ACME-1"])
    # doing (held) still blocks
    claim = leases.claim_issue(actor=world.a, identifier="ACME-1")
    assert shape(world.a, "ACME-2")["blockedByOpen"] == ["ACME-1"]
    # a manual blocked flag still blocks
    issue_update(actor=world.a, identifier="ACME-1", status="blocked", claim_token=claim["claimToken"])
    leases.release_issue(actor=world.a, identifier="ACME-1", claim_token=claim["claimToken"])
    assert dispatchable(world.a) == []
    # todo still blocks
    issue_update(actor=world.a, identifier="ACME-1", status="todo")
    assert dispatchable(world.a) == ["ACME-1"]
    # canceled unblocks
    issue_update(actor=world.a, identifier="ACME-1", status="canceled", cancel_reason="obsolete")
    assert dispatchable(world.a) == ["ACME-2"]
    assert shape(world.a, "ACME-2")["blockedByOpen"] == []
    assert shape(world.a, "ACME-2")["blockedBy"] == ["ACME-1"]
    # reopening blocks again
    issue_update(actor=world.a, identifier="ACME-1", status="todo")
    assert dispatchable(world.a) == ["ACME-1"]
    # done unblocks
    finish(world.a, "ACME-1")
    assert dispatchable(world.a) == ["ACME-2"]


def test_review_keeps_blocking(world, unchanged):
    new_issue(world.a, "Blocker")
    new_issue(world.a, "Waiting", blocked_by=["ACME-1"])
    to_review(world, "ACME-1")
    assert Issue.objects.get(number=1, project=world.project).status == "review"
    refused(
        unchanged,
        "BLOCKED",
        lambda: leases.claim_issue(actor=world.b, identifier="ACME-2"),
        blockers=[{"identifier": "ACME-1", "status": "review"}],
    )
    # the reviewer is handed the review, never the waiting issue
    claim = leases.next_issue(actor=world.b)
    assert claim["issue"]["identifier"] == "ACME-1"
    assert leases.next_issue(actor=world.b)["issue"] is None
    issue_update(actor=world.b, identifier="ACME-1", status="done", claim_token=claim["claimToken"])
    assert leases.next_issue(actor=world.b)["issue"]["identifier"] == "ACME-2"


def test_a_sent_back_review_keeps_blocking(world):
    new_issue(world.a, "Blocker")
    new_issue(world.a, "Waiting", blocked_by=["ACME-1"])
    to_review(world, "ACME-1")
    claim = leases.claim_issue(actor=world.b, identifier="ACME-1")
    comment_create(actor=world.b, issue="ACME-1", body="Missing tests")
    issue_update(actor=world.b, identifier="ACME-1", status="todo", claim_token=claim["claimToken"])
    assert dispatchable(world.a) == ["ACME-1"]


def test_remove_relation_unblocks(world):
    new_issue(world.a, "Blocker")
    new_issue(world.a, "Waiting", blocked_by=["ACME-1"])
    assert relation_remove(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="blocks") == {
        "source": "ACME-1",
        "target": "ACME-2",
        "type": "blocks",
        "removed": True,
    }
    assert Relation.objects.count() == 0
    assert dispatchable(world.a) == ["ACME-1", "ACME-2"]
    assert Activity.objects.filter(verb="relation_removed").count() == 2
    # removing it again is a no-op
    assert relation_remove(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="blocks")["removed"] is False


def test_remove_relation_by_blocked_by(world):
    new_issue(world.a, "Blocker")
    new_issue(world.a, "Waiting", blocked_by=["ACME-1"])
    assert relation_remove(actor=world.a, source_id="ACME-2", target_id="ACME-1", type="blocked_by")["removed"] is True
    assert Relation.objects.count() == 0


def test_remove_undirected_relation_from_either_end(world):
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    relation_add(actor=world.a, source_id="ACME-1", target_id="ACME-2", type="duplicate")
    assert relation_remove(actor=world.a, source_id="ACME-2", target_id="ACME-1", type="duplicate")["removed"] is True
    assert Relation.objects.count() == 0


def test_blocked_by_added_on_edit(world):
    new_issue(world.a, "A")
    new_issue(world.a, "B")
    issue_update(actor=world.a, identifier="ACME-2", blocked_by=["ACME-1"])
    assert shape(world.a, "ACME-2")["blockedBy"] == ["ACME-1"]
    assert Activity.objects.filter(verb="updated").get().changes == {"blockedBy+": [None, ["ACME-1"]]}
