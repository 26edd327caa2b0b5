"""Creating and editing issues (SPEC §3): required fields, dates, statuses, containers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apps.core.errors import ServiceError
from apps.issues.models import Activity, Claim, Issue
from apps.issues.selectors import issue_resolve
from apps.issues.services import comment_create, issue_create, issue_update
from apps.issues.shapes import issue_shape
from apps.leases import services as leases
from apps.orgs.models import Org, Project
from apps.orgs.services import actor_for_human, agent_key_authenticate
from tests.conftest import new_issue


def refused(unchanged, code, call, **details) -> ServiceError:
    """Run ``call``; it must be refused with ``code`` and leave the database as it was."""
    with unchanged(), pytest.raises(ServiceError) as caught:
        call()
    assert caught.value.code == code, caught.value
    for name, value in details.items():
        assert caught.value.details.get(name) == value, caught.value.details
    return caught.value


def shape(actor, identifier):
    issue = issue_resolve(actor=actor, identifier=identifier)
    return issue_shape(Issue.objects.with_people().get(pk=issue.pk), actor=actor)


def with_timezone(w, tz):
    Org.objects.filter(pk=w.org.pk).update(timezone=tz)
    return agent_key_authenticate(w.owner_agent.raw)


# --- identifiers -----------------------------------------------------------------------


def test_identifiers_are_prefix_n_sequential_per_project(world):
    # given two orgs, when issues are filed in each
    first = new_issue(world.a, "One")
    second = new_issue(world.b, "Two")
    third = new_issue(world.a, "Three")
    outsider = new_issue(world.x, "Elsewhere")
    # then numbers run 1, 2, 3 in ACME and start again at 1 in GLX
    assert [first.identifier, second.identifier, third.identifier] == ["ACME-1", "ACME-2", "ACME-3"]
    assert outsider.identifier == "GLX-1"
    assert Project.objects.get(pk=world.project.pk).issue_seq == 3


def test_a_refused_create_does_not_burn_a_number(world, unchanged):
    new_issue(world.a, "One")
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "Bad", blocked_by=["ACME-99"]), field="blockedBy")
    assert new_issue(world.a, "Two").identifier == "ACME-2"


def test_create_stores_the_fields_and_a_receipt(world):
    issue = new_issue(
        world.a,
        "Fix the login bug",
        body="Steps:\n1. log in",
        priority=2,
        assignee=world.member.email,
        labels=["bug", "auth", "bug"],
        acceptance=["login works", "test added"],
    )
    s = shape(world.a, issue.identifier)
    assert {
        k: s[k]
        for k in (
            "identifier",
            "title",
            "body",
            "status",
            "priority",
            "work",
            "assignee",
            "author",
            "labels",
            "acceptance",
            "checkpoint",
            "reclaimCount",
            "claim",
            "blockedBy",
            "blocks",
            "parent",
            "awaitingTriage",
            "source",
            "closedAt",
            "cancelReason",
        )
    } == {
        "identifier": "ACME-1",
        "title": "Fix the login bug",
        "body": "Steps:\n1. log in",
        "status": "todo",
        "priority": 2,
        "work": True,
        "assignee": world.member.email,
        "author": world.owner.email,
        "labels": ["auth", "bug"],
        "acceptance": ["login works", "test added"],
        "checkpoint": None,
        "reclaimCount": 0,
        "claim": None,
        "blockedBy": [],
        "blocks": [],
        "parent": None,
        "awaitingTriage": False,
        "source": "agent",
        "closedAt": None,
        "cancelReason": None,
    }
    receipts = list(Activity.objects.filter(issue_id=issue.pk).values_list("verb", flat=True))
    assert receipts == ["created"]


# --- required fields -------------------------------------------------------------------


@pytest.mark.parametrize("title", [None, "", "   ", "two\nlines", "x" * 301, 42])
def test_title_is_required_one_line_text(world, unchanged, title):
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, title), field="title")
    assert Issue.objects.count() == 0


@pytest.mark.parametrize("work", [None, "maybe", 1])
def test_work_is_required_and_boolean(world, unchanged, work):
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_create(actor=world.a, title="T", work=work, no_dependency="none"),
        field="work",
    )


@pytest.mark.parametrize("kwargs", [{}, {"no_dependency": "   "}, {"no_dependency": None}, {"blocked_by": []}])
def test_blocked_by_or_no_dependency_is_required(world, unchanged, kwargs):
    refused(unchanged, "INVALID_ARGUMENT", lambda: issue_create(actor=world.a, title="T", work=True, **kwargs), field="blockedBy")


def test_no_dependency_must_be_one_line(world, unchanged):
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_create(actor=world.a, title="T", work=True, no_dependency="a\nb"),
        field="noDependency",
    )


def test_blocked_by_creates_the_edge(world):
    blocker = new_issue(world.a, "Blocker")
    issue = new_issue(world.a, "Waits", blocked_by=[blocker.identifier, blocker.identifier.lower()])
    assert shape(world.a, issue.identifier)["blockedBy"] == ["ACME-1"]
    assert shape(world.a, issue.identifier)["blockedByOpen"] == ["ACME-1"]
    assert shape(world.a, blocker.identifier)["blocks"] == ["ACME-2"]


def test_blocked_by_a_missing_issue_is_refused(world, unchanged):
    new_issue(world.a, "Exists")
    err = refused(
        unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "T", blocked_by=["ACME-1", "ACME-7"]), field="blockedBy"
    )
    assert "ACME-7" in err.message


def test_blocked_by_another_orgs_issue_is_refused_as_missing(world, unchanged):
    theirs = new_issue(world.x, "Theirs")
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "T", blocked_by=[theirs.identifier]), field="blockedBy")


def test_blocked_by_an_issue_with_the_same_identifier_in_another_org_is_not_linked(world, unchanged):
    # given the outsider's org also has a project ACME with issue ACME-1
    from apps.orgs.services import project_create

    project_create(org=world.other_org, prefix="ACME")
    new_issue(world.x, "Theirs", project="ACME")
    # when our agent names ACME-1, which does not exist in our org, it is refused
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "T", blocked_by=["ACME-1"]), field="blockedBy")


@pytest.mark.parametrize("priority", [5, -1, "high", 1.5, True, None, [1]])
def test_invalid_priority_is_refused(world, unchanged, priority):
    kwargs = {"priority": priority}
    if priority is None:  # None means "not given" on create; an edit must say a value
        issue = new_issue(world.a, "T")
        refused(
            unchanged,
            "INVALID_ARGUMENT",
            lambda: issue_update(actor=world.a, identifier=issue.identifier, **kwargs),
            field="priority",
        )
        return
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "T", **kwargs), field="priority")


@pytest.mark.parametrize("priority", [0, 1, 2, 3, 4, "3"])
def test_valid_priorities(world, priority):
    assert new_issue(world.a, "T", priority=priority).priority == int(priority)


# --- deadlines -------------------------------------------------------------------------


def test_due_at_epoch_milliseconds(world):
    issue = new_issue(world.a, "T", due_at=1_800_000_000_000)
    assert issue.due_at == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    assert shape(world.a, issue.identifier)["dueAt"] == "2027-01-15T08:00:00Z"


def test_due_at_epoch_milliseconds_as_text(world):
    assert new_issue(world.a, "T", due_at="1800000000000").due_at == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2027-02-03T04:05:06Z", datetime(2027, 2, 3, 4, 5, 6, tzinfo=UTC)),
        ("2027-02-03T12:05:06+08:00", datetime(2027, 2, 3, 4, 5, 6, tzinfo=UTC)),
        ("2027-02-03T04:05:06.250+00:00", datetime(2027, 2, 3, 4, 5, 6, 250000, tzinfo=UTC)),
    ],
)
def test_due_at_iso_datetime(world, value, expected):
    assert new_issue(world.a, "T", due_at=value).due_at == expected


def test_due_at_naive_datetime_is_read_in_the_org_timezone(world):
    actor = with_timezone(world, "Asia/Shanghai")
    issue = new_issue(actor, "T", due_at="2027-02-03T12:00:00")
    assert issue.due_at == datetime(2027, 2, 3, 4, 0, tzinfo=UTC)


def test_due_at_day_resolves_to_end_of_day_in_the_org_timezone(world):
    # given an org in Shanghai (UTC+8)
    actor = with_timezone(world, "Asia/Shanghai")
    # when a deadline is given as a day
    issue = new_issue(actor, "T", due_at="2026-12-01")
    # then it is the last millisecond of that day in Shanghai
    assert issue.due_at == datetime(2026, 12, 1, 15, 59, 59, 999000, tzinfo=UTC)
    assert shape(actor, issue.identifier)["dueAt"] == "2026-12-01T15:59:59.999000Z"


def test_due_at_day_in_utc_org(world):
    issue = new_issue(world.a, "T", due_at="2026-12-01")
    assert issue.due_at == datetime(2026, 12, 1, 23, 59, 59, 999000, tzinfo=UTC)


def test_due_at_day_in_a_western_org(world):
    actor = with_timezone(world, "America/New_York")  # UTC-5 in December
    assert new_issue(actor, "T", due_at="2026-12-01").due_at == datetime(2026, 12, 2, 4, 59, 59, 999000, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        -1_800_000_000_000,
        "-1800000000000",
        10**20,
        1_700_000_000,  # seconds read as ms: 1970
        "9999-12-31",
        "1999-12-31",
        "1999-12-31T23:00:00Z",
        "2026-02-30",
        "tomorrow",
        "2027-13-01",
        True,
        [2027],
        1e30,
    ],
)
def test_negative_or_absurd_due_at_is_refused(world, unchanged, value):
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "T", due_at=value), field="dueAt")


def test_due_at_can_be_cleared_by_an_edit(world):
    issue = new_issue(world.a, "T", due_at="2027-01-01")
    issue_update(actor=world.a, identifier=issue.identifier, due_at=None)
    assert Issue.objects.get(pk=issue.pk).due_at is None


# --- statuses --------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["doing", "review", "done", "canceled", "open"])
def test_a_new_issue_starts_as_todo_or_blocked(world, unchanged, status):
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "T", status=status), field="status")


def test_unknown_status_on_edit_is_refused(world, unchanged):
    issue = new_issue(world.a, "T")
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier=issue.identifier, status="wontfix"),
        field="status",
    )


def test_cancel_requires_a_cancel_reason(world, unchanged):
    issue = new_issue(world.a, "T")
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier=issue.identifier, status="canceled"),
        field="cancelReason",
    )
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier=issue.identifier, status="canceled", cancel_reason="  "),
        field="cancelReason",
    )


def test_cancel_with_a_reason_closes_and_reopen_clears_it(world):
    issue = new_issue(world.a, "T")
    issue_update(actor=world.a, identifier=issue.identifier, status="canceled", cancel_reason="Not needed anymore")
    s = shape(world.a, issue.identifier)
    assert (s["status"], s["cancelReason"]) == ("canceled", "Not needed anymore")
    assert s["closedAt"] is not None
    assert list(Activity.objects.filter(issue_id=issue.pk).values_list("verb", flat=True)) == ["created", "canceled"]
    # when it is reopened
    issue_update(actor=world.a, identifier=issue.identifier, status="todo")
    s = shape(world.a, issue.identifier)
    assert (s["status"], s["cancelReason"], s["closedAt"]) == ("todo", None, None)


def test_blocked_status_is_manual_and_never_dispatched(world, unchanged):
    # given an issue waiting on an outside party
    issue = new_issue(world.a, "Wait for vendor", status="blocked", priority=1)
    # then no pull hands it out, and a direct claim is refused
    assert leases.next_issue(actor=world.a)["issue"] is None
    assert leases.next_batch(actor=world.a)["issues"] == []
    refused(
        unchanged,
        "NOT_ELIGIBLE:blocked",
        lambda: leases.claim_issue(actor=world.a, identifier=issue.identifier),
        status="blocked",
    )
    # when a human clears the flag it is dispatched
    issue_update(actor=world.a, identifier=issue.identifier, status="todo")
    assert leases.next_issue(actor=world.a)["issue"]["identifier"] == issue.identifier


def test_blocked_status_is_never_cleared_automatically(world):
    # given an issue flagged blocked that also depends on another
    blocker = new_issue(world.a, "Blocker")
    waiting = new_issue(world.a, "Waiting", blocked_by=[blocker.identifier], status="blocked")
    # when its blocker is done
    claim = leases.claim_issue(actor=world.a, identifier=blocker.identifier)
    issue_update(actor=world.a, identifier=blocker.identifier, status="done", claim_token=claim["claimToken"])
    # then it stays blocked and is still not dispatched
    assert Issue.objects.get(pk=waiting.pk).status == "blocked"
    assert leases.next_issue(actor=world.a)["issue"] is None


# --- containers and parents ------------------------------------------------------------


def test_containers_are_never_dispatched_and_claim_says_not_work(world, unchanged):
    container = new_issue(world.a, "Epic", work=False, priority=1)
    assert leases.next_issue(actor=world.a) == {
        "issue": None,
        "ready": 0,
        "otherLanes": 0,
        "blocked": 0,
        "claimed": 0,
        "awaitingTriage": 0,
        "tellHuman": "The queue is empty: file new work (save_issue, the Dash or a connector) to give agents something to do.",
    }
    assert leases.next_batch(actor=world.a, all_lanes=True) == {"issues": []}
    refused(unchanged, "NOT_WORK", lambda: leases.claim_issue(actor=world.a, identifier=container.identifier))


def test_parent_must_be_a_container(world, unchanged):
    work_item = new_issue(world.a, "Work")
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "Child", parent=work_item.identifier), field="parent")


@pytest.mark.parametrize("parent", ["ACME-42", "GLX-1", "not an id"])
def test_parent_must_exist_in_the_org(world, unchanged, parent):
    new_issue(world.x, "Theirs", work=False)
    refused(unchanged, "INVALID_ARGUMENT", lambda: new_issue(world.a, "Child", parent=parent), field="parent")


def test_child_of_a_container(world):
    epic = new_issue(world.a, "Epic", work=False)
    child = new_issue(world.a, "Child", parent=epic.identifier)
    assert shape(world.a, child.identifier)["parent"] == "ACME-1"
    assert list(Issue.objects.get(pk=epic.pk).children.all()) == [child]


def test_a_container_cannot_be_its_own_ancestor(world, unchanged):
    outer = new_issue(world.a, "Outer", work=False)
    inner = new_issue(world.a, "Inner", work=False, parent=outer.identifier)
    refused(unchanged, "CYCLE", lambda: issue_update(actor=world.a, identifier=outer.identifier, parent=inner.identifier))


def test_a_parent_cannot_become_a_work_item_container_rule_on_edit(world, unchanged):
    epic = new_issue(world.a, "Epic", work=False)
    item = new_issue(world.a, "Item")
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier=epic.identifier, parent=item.identifier),
        field="parent",
    )


# --- edits and the claim fence ---------------------------------------------------------


def test_edit_of_an_unheld_issue_needs_no_claim(world):
    issue = new_issue(world.a, "Old title", priority=4)
    issue_update(actor=world.b, identifier=issue.identifier, title="New title", priority=2, labels=["x"])
    s = shape(world.a, issue.identifier)
    assert (s["title"], s["priority"], s["labels"]) == ("New title", 2, ["x"])
    entry = Activity.objects.filter(issue_id=issue.pk, verb="updated").get()
    assert entry.changes == {"title": ["Old title", "New title"], "priority": [4, 2], "labels": [[], ["x"]]}
    assert entry.principal_id == world.member.pk


def test_an_edit_that_changes_nothing_records_nothing(world):
    issue = new_issue(world.a, "Same", priority=2)
    issue_update(actor=world.a, identifier=issue.identifier, title="Same", priority=2)
    assert Activity.objects.filter(issue_id=issue.pk).count() == 1


def test_edits_of_a_held_issue_need_the_holders_token(world, unchanged):
    issue = new_issue(world.a, "Held")
    claim = leases.claim_issue(actor=world.a, identifier=issue.identifier)
    # another principal cannot edit it
    err = refused(
        unchanged,
        "CLAIM_MISMATCH",
        lambda: issue_update(actor=world.b, identifier=issue.identifier, title="Mine now"),
        reason="holder-only-writes",
    )
    assert err.http_status == 403
    # the holder without its token cannot either
    refused(unchanged, "CLAIM_MISMATCH", lambda: issue_update(actor=world.a, identifier=issue.identifier, title="x"))
    # the holder with its token can
    issue_update(actor=world.a, identifier=issue.identifier, title="Renamed", claim_token=claim["claimToken"])
    assert Issue.objects.get(pk=issue.pk).title == "Renamed"


def test_a_status_write_never_frees_the_lease(world):
    issue = new_issue(world.a, "Held")
    claim = leases.claim_issue(actor=world.a, identifier=issue.identifier)
    issue_update(actor=world.a, identifier=issue.identifier, status="todo", claim_token=claim["claimToken"])
    row = Issue.objects.get(pk=issue.pk)
    assert row.status == "todo"
    assert row.lease_claim_id == Claim.objects.get().pk
    assert Claim.objects.get().ended_at is None
    # and nobody else is handed it while the lease lives
    assert leases.next_issue(actor=world.b)["issue"] is None


def test_an_unheld_doing_issue_is_claimable(world):
    issue = new_issue(world.a, "Held")
    claim = leases.claim_issue(actor=world.a, identifier=issue.identifier)
    leases.release_issue(actor=world.a, identifier=issue.identifier, claim_token=claim["claimToken"])
    Issue.objects.filter(pk=issue.pk).update(status="doing")
    assert leases.claim_issue(actor=world.b, identifier=issue.identifier)["issue"]["status"] == "doing"


def test_a_held_issue_cannot_become_a_container(world, unchanged):
    issue = new_issue(world.a, "Held")
    claim = leases.claim_issue(actor=world.a, identifier=issue.identifier)
    refused(
        unchanged,
        "INVALID_ARGUMENT",
        lambda: issue_update(actor=world.a, identifier=issue.identifier, work=False, claim_token=claim["claimToken"]),
        field="work",
    )


def test_a_human_in_the_dash_can_finish_without_a_claim(world):
    issue = new_issue(world.a, "T")
    human = actor_for_human(user=world.owner, org=world.org)
    issue_update(actor=human, identifier=issue.identifier, status="done")
    row = Issue.objects.get(pk=issue.pk)
    assert row.status == "done" and row.closed_at is not None


def test_an_agent_cannot_finish_without_a_claim(world, unchanged):
    issue = new_issue(world.a, "T")
    refused(unchanged, "CLAIM_REQUIRED", lambda: issue_update(actor=world.a, identifier=issue.identifier, status="done"))


# --- tenancy ---------------------------------------------------------------------------


def test_another_orgs_issue_reads_as_not_found(world, unchanged):
    ours = new_issue(world.a, "Ours")
    for call in (
        lambda: issue_resolve(actor=world.x, identifier=ours.identifier),
        lambda: issue_update(actor=world.x, identifier=ours.identifier, title="Pwned"),
        lambda: issue_update(actor=world.x, identifier=ours.identifier, status="canceled", cancel_reason="x"),
        lambda: comment_create(actor=world.x, issue=ours.identifier, body="hello"),
        lambda: leases.check_claim(actor=world.x, identifier=ours.identifier),
        lambda: new_issue(world.x, "T", project="ACME"),
    ):
        refused(unchanged, "NOT_FOUND", call)


def test_identifier_lookup_is_scoped_to_the_org_even_with_the_same_prefix(world):
    from apps.orgs.services import project_create

    project_create(org=world.other_org, prefix="ACME")
    ours = new_issue(world.a, "Ours")
    theirs = new_issue(world.x, "Theirs", project="ACME")
    assert ours.identifier == theirs.identifier == "ACME-1"
    assert issue_resolve(actor=world.a, identifier="ACME-1").pk == ours.pk
    assert issue_resolve(actor=world.x, identifier="ACME-1").pk == theirs.pk
