"""The board, saved filters and bulk changes, through the services and the Dash endpoints.

The browser journeys (live board, keyboard, selection, layout) are in test_board_browser.py.
"""

from __future__ import annotations

import pytest
from django.db import connection

from apps.core.errors import ServiceError
from apps.dash.selectors import QueueFilters, board_page, queue_page
from apps.issues.models import Activity, Issue
from apps.issues.services import issue_bulk_update, issue_update
from apps.orgs.models import SavedFilter
from apps.orgs.selectors import saved_filters_for
from apps.orgs.services import actor_for_human, saved_filter_delete, saved_filter_save
from tests.conftest import new_issue
from tests.dash.conftest import signed_in


def _human(world, user):
    return actor_for_human(user=user, org=world.org)


def _cards(page) -> dict:
    return {c["status"]: [r["s"]["identifier"] for r in c["cards"]] for c in page["columns"]}


# --- the board -------------------------------------------------------------------------


def test_board_columns_follow_the_queue_filters(dash):
    w = dash.w
    owner = _human(w, w.owner)
    urgent = new_issue(w.a, "Urgent payment bug", priority=1)
    blocked = new_issue(w.a, "Blocked payment follow-up", priority=1)
    issue_update(actor=owner, identifier=blocked.identifier, status="blocked")
    done = new_issue(w.a, "Old payment work", priority=1)
    issue_update(actor=owner, identifier=done.identifier, status="done")
    new_issue(w.a, "Low chore", priority=4)

    filters = {"priority": "1", "q": "payment"}
    board = board_page(actor=owner, filters=QueueFilters.from_query(filters))
    queue = queue_page(actor=owner, filters=QueueFilters.from_query({**filters, "status": "all"}))
    assert _cards(board) == {
        "todo": [urgent.identifier],
        "doing": [],
        "blocked": [blocked.identifier],
        "review": [],
        "done": [done.identifier],
        "canceled": [],
    }
    assert sorted(r["s"]["identifier"] for r in queue["rows"]) == sorted([urgent.identifier, blocked.identifier, done.identifier])
    assert board["matched"] == queue["matched"] == 3
    assert {c["status"]: c["count"] for c in board["columns"]}["blocked"] == 1
    closed = {c["status"]: c["open"] for c in board["columns"] if c["closed"]}
    assert closed == {"done": False, "canceled": False}  # collapsed unless asked for

    one = board_page(actor=owner, filters=QueueFilters.from_query({"status": "done"}))
    assert [c["status"] for c in one["columns"]] == ["done"] and one["columns"][0]["open"]


def test_board_page_and_live_fragment_keep_the_filters(dash):
    page = dash.owner.get("/board/?priority=2&project=ACME")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'data-issue="{dash.issue_a.identifier}"' in html
    assert 'hx-get="/board/live/?project=ACME&amp;status=open&amp;priority=2' in html
    assert 'href="/queue/?project=ACME&amp;status=open&amp;priority=2&amp;order=dispatch" id="view-table"' in html
    table = dash.owner.get("/queue/?priority=2&project=ACME").content.decode()
    assert 'href="/board/?project=ACME&amp;status=open&amp;priority=2&amp;order=dispatch" id="view-board"' in table
    live = dash.owner.get("/board/live/?priority=3").content.decode()
    assert live.startswith('\n<div id="board-live"') and dash.issue_a.identifier not in live


def test_board_shows_nothing_of_another_org(dash):
    assert dash.issue_b.identifier.encode() not in dash.owner.get("/board/?status=all").content
    assert dash.issue_a.identifier.encode() not in dash.outsider.get("/board/?status=all").content


# --- saved filters ---------------------------------------------------------------------


def test_saved_filters_belong_to_their_member_only(dash):
    w = dash.w
    owner, member = _human(w, w.owner), _human(w, w.member)
    saved = saved_filter_save(actor=owner, name="urgent bugs", query="status=open&priority=1&q=secret+words")
    saved_filter_save(actor=member, name="mine", query="lane=me")
    assert [f.name for f in saved_filters_for(actor=owner)] == ["urgent bugs"]
    assert [f.name for f in saved_filters_for(actor=member)] == ["mine"]
    # The query is sealed at rest: its words are not in the row.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT query_enc FROM orgs_savedfilter WHERE id = %s", [saved.pk.hex if connection.vendor == "sqlite" else saved.pk]
        )
        raw = bytes(cur.fetchone()[0])
    assert b"secret" not in raw and SavedFilter.objects.get(pk=saved.pk).query == "status=open&priority=1&q=secret+words"
    # The same name again replaces the query.
    saved_filter_save(actor=owner, name="urgent bugs", query="priority=2")
    assert [(f.name, f.query) for f in saved_filters_for(actor=owner)] == [("urgent bugs", "priority=2")]
    # Nobody else deletes it, not even an owner deleting a member's filter.
    mine = SavedFilter.objects.get(user=w.member)
    with pytest.raises(ServiceError) as refused:
        saved_filter_delete(actor=owner, filter_id=mine.pk)
    assert refused.value.code == "NOT_FOUND" and SavedFilter.objects.filter(pk=mine.pk).exists()
    saved_filter_delete(actor=member, filter_id=mine.pk)
    assert not SavedFilter.objects.filter(pk=mine.pk).exists()


@pytest.mark.parametrize(
    "name, query, code",
    [
        ("", "status=all", "INVALID_ARGUMENT"),
        ("x" * 81, "status=all", "INVALID_ARGUMENT"),
        ("long", "q=" + "a" * 2001, "INVALID_ARGUMENT"),
    ],
)
def test_bad_saved_filters_are_refused_and_save_nothing(dash, name, query, code):
    with pytest.raises(ServiceError) as refused:
        saved_filter_save(actor=_human(dash.w, dash.w.owner), name=name, query=query)
    assert refused.value.code == code and SavedFilter.objects.count() == 0


def test_agents_have_no_saved_filters(dash):
    with pytest.raises(ServiceError) as refused:
        saved_filter_save(actor=dash.w.a, name="agent", query="status=all")
    assert refused.value.code == "FORBIDDEN" and SavedFilter.objects.count() == 0


def test_saved_filter_endpoints(dash):
    saved = dash.owner.post("/filters/", {"name": "p2", "filters": "priority=2&offset=200&bogus=1", "view": "board"})
    assert saved.status_code == 302 and saved["Location"] == "/board/?status=open&priority=2&order=dispatch"
    row = SavedFilter.objects.get()
    assert (row.name, row.query, row.user_id) == ("p2", "status=open&priority=2&order=dispatch", dash.w.owner.pk)
    queue = dash.owner.get("/queue/").content.decode()
    assert 'href="/queue/?status=open&amp;priority=2&amp;order=dispatch">p2</a>' in queue
    assert 'data-filter="p2"' not in dash.member.get("/queue/").content.decode()
    # A member cannot delete the owner's filter by its id.
    refused = dash.member.post(f"/filters/{row.pk}/delete/", {"filters": ""}, follow=True)
    assert b"NOT_FOUND" in refused.content and SavedFilter.objects.filter(pk=row.pk).exists()
    assert dash.owner.get(f"/filters/{row.pk}/delete/").status_code == 405
    gone = dash.owner.post(f"/filters/{row.pk}/delete/", {"filters": "priority=2", "view": "queue"})
    assert gone.status_code == 302 and not SavedFilter.objects.exists()


def test_saved_filter_post_needs_csrf(dash):
    client = signed_in(dash.w.owner, csrf=True)
    assert client.post("/filters/", {"name": "x", "filters": "status=all"}).status_code == 403
    assert SavedFilter.objects.count() == 0


# --- bulk changes ----------------------------------------------------------------------


def test_bulk_applies_each_issue_and_reports_refusals(dash):
    w = dash.w
    owner = _human(w, w.owner)
    a = new_issue(w.a, "One")
    b = new_issue(w.a, "Two", acceptance=["tests pass"])  # done needs evidence: refused
    c = new_issue(w.a, "Three")
    before = Activity.objects.count()
    results = issue_bulk_update(actor=owner, identifiers=[a.identifier, b.identifier, c.identifier], status="done")
    assert [(r["identifier"], r["ok"]) for r in results] == [(a.identifier, True), (b.identifier, False), (c.identifier, True)]
    assert results[1]["error"].code == "ACCEPTANCE_EVIDENCE_REQUIRED"
    assert dict(Issue.objects.filter(pk__in=[a.pk, b.pk, c.pk]).values_list("number", "status")) == {
        a.number: "done",
        b.number: "todo",
        c.number: "done",
    }
    receipts = Activity.objects.order_by("pk")[before:]
    assert sorted(r.issue_id for r in receipts) == sorted([a.pk, c.pk])  # one receipt per changed issue


def test_bulk_labels_priority_and_lane(dash):
    w = dash.w
    owner = _human(w, w.owner)
    a = new_issue(w.a, "One", labels=["bug", "old"])
    b = new_issue(w.a, "Two")
    results = issue_bulk_update(
        actor=owner,
        identifiers=[a.identifier, b.identifier],
        priority="2",
        assignee=w.member.email,
        labels_add=["triaged"],
        labels_remove=["old"],
    )
    assert all(r["ok"] for r in results)
    for issue, labels in ((a, ["bug", "triaged"]), (b, ["triaged"])):
        fresh = Issue.objects.get(pk=issue.pk)
        assert (fresh.priority, fresh.assignee_id) == (2, w.member.pk)
        assert sorted(fresh.labels.values_list("name", flat=True)) == labels
        assert Activity.objects.filter(issue=issue, verb="updated").count() == 1


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"identifiers": [], "status": "done"}, "identifiers"),
        ({"identifiers": ["ACME-1"]}, "changes"),
        ({"identifiers": ["ACME-1"], "priority": "9"}, "priority"),
        ({"identifiers": ["ACME-1"], "status": "gone"}, "status"),
        ({"identifiers": [f"ACME-{n}" for n in range(1, 60)], "status": "done"}, "identifiers"),
    ],
)
def test_a_bulk_request_without_issues_or_changes_is_refused_whole(dash, unchanged, kwargs, field):
    with unchanged(), pytest.raises(ServiceError) as refused:
        issue_bulk_update(actor=_human(dash.w, dash.w.owner), **kwargs)
    assert refused.value.code == "INVALID_ARGUMENT" and refused.value.details["field"] == field


def test_bulk_endpoint(dash):
    w = dash.w
    other = new_issue(w.a, "Second", acceptance=["tests pass"])
    response = dash.owner.post(
        "/queue/bulk/",
        {
            "issue": [dash.issue_a.identifier, other.identifier, dash.issue_b.identifier],
            "status": "done",
            "filters": "priority=2",
        },
        follow=True,
    )
    html = response.content.decode()
    assert response.redirect_chain[-1][0] == "/queue/?status=open&priority=2&order=dispatch"
    assert f"Changed 1 issue: {dash.issue_a.identifier}." in html
    assert f"{other.identifier}: ACCEPTANCE_EVIDENCE_REQUIRED" in html
    assert f"{dash.issue_b.identifier}: NOT_FOUND" in html  # another org's issue is not found
    assert Issue.objects.get(pk=dash.issue_a.pk).status == "done"
    assert Issue.objects.get(pk=other.pk).status == "todo" and Issue.objects.get(pk=dash.issue_b.pk).status == "todo"


def test_bulk_endpoint_needs_csrf_and_post(dash, unchanged):
    client = signed_in(dash.w.owner, csrf=True)
    with unchanged():
        assert client.post("/queue/bulk/", {"issue": [dash.issue_a.identifier], "status": "done"}).status_code == 403
        assert dash.owner.get("/queue/bulk/").status_code == 405
        assert dash.anon.post("/queue/bulk/", {"issue": [dash.issue_a.identifier], "status": "done"}).status_code == 302
