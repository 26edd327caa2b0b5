"""Wiring of every endpoint: the right operation, the right status, refusals that change nothing."""

from __future__ import annotations

import json

import pytest

from apps.api.views import ROUTES
from apps.issues.models import Activity, Comment, Issue
from apps.tools import operations
from tests.api.conftest import client, create


def test_every_tool_has_an_endpoint():
    tools = {op.tool for _, methods in ROUTES.values() for op in methods.values()}
    assert tools == set(operations.TOOLS) | set(operations.NON_TOOL_OPERATIONS)
    assert len({op.operation_id for _, methods in ROUTES.values() for op in methods.values()}) == sum(
        len(methods) for _, methods in ROUTES.values()
    )


def test_create_then_read_and_edit(world, owner):
    issue = create(owner, "Write the parser", body="details", priority=2, labels=["api"], acceptance=["parses"])
    assert issue["identifier"] == "ACME-1"
    assert (issue["title"], issue["body"], issue["priority"], issue["labels"], issue["acceptance"]) == (
        "Write the parser",
        "details",
        2,
        ["api"],
        ["parses"],
    )
    r = owner.get("/api/v1/issues/acme-1")
    assert r.status_code == 200 and r.json()["identifier"] == "ACME-1"
    r = owner.patch("/api/v1/issues/ACME-1", {"title": "Write the lexer", "assignee": "me"}, format="json")
    assert r.status_code == 200
    assert (r.json()["title"], r.json()["assignee"], r.json()["body"]) == ("Write the lexer", world.owner.email, "details")
    r = owner.get("/api/v1/issues/ACME-1/activity")
    assert r.status_code == 200
    assert [e["verb"] for e in r.json()["activity"]] == [
        e.verb for e in Activity.objects.filter(issue__number=1, org=world.org).order_by("seq")
    ]
    assert r.json()["identifier"] == "ACME-1" and len(r.json()["activity"]) >= 2


def test_create_refusals_change_nothing(world, owner, unchanged):
    with unchanged():
        for body, field in [
            ({"title": "No dependency said", "work": True}, "blockedBy"),
            ({"work": True, "noDependency": "x"}, "title"),
            ({"title": "t", "noDependency": "x"}, "work"),
            ({"title": "t", "work": "yes", "noDependency": "x"}, "work"),
            ({"title": "t", "work": True, "noDependency": "x", "priority": 9}, "priority"),
            ({"title": "t", "work": True, "blockedBy": ["ACME-99"]}, "blockedBy"),
        ]:
            r = owner.post("/api/v1/issues", body, format="json")
            assert r.status_code == 400, (body, r.content)
            assert r.json()["code"] == "INVALID_ARGUMENT"
            assert r.json()["field"] == field, (body, r.json())
        # an argument the endpoint does not have is INVALID naming it (SPEC §5), as on MCP
        for path, body in [
            ("/api/v1/issues", {"title": "t", "work": True, "noDependency": "x", "bogus": 1}),
            ("/api/v1/issues/ACME-1/comments", {"body": "hi", "claimtoken": "x"}),
            ("/api/v1/usage/reports", {"runtime": "codex", "days": [], "bogus": 1}),
        ]:
            r = owner.post(path, body, format="json")
            assert (r.status_code, r.json()["code"]) == (400, "INVALID"), (path, r.content)
            assert r.json()["field"] in ("bogus", "claimtoken") and r.json()["field"] in r.json()["message"]


def test_malformed_bodies_are_refused_with_a_code(world, owner, unchanged):
    with unchanged():
        r = owner.post("/api/v1/issues", "{not json", content_type="application/json")
        assert (r.status_code, r.json()["code"]) == (400, "INVALID_ARGUMENT")
        r = owner.post("/api/v1/issues", "[1, 2]", content_type="application/json")
        assert (r.status_code, r.json()["code"]) == (400, "INVALID_ARGUMENT")
        r = owner.post("/api/v1/issues", "title=x", content_type="application/x-www-form-urlencoded")
        assert (r.status_code, r.json()["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
        r = owner.delete("/api/v1/issues")
        assert (r.status_code, r.json()["code"]) == (405, "METHOD_NOT_ALLOWED")
        r = owner.get("/api/v1/no/such/thing")
        assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
        r = owner.get("/api/nothing-here")
        assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
        r = owner.get("/api/v1/issues/ACME-404")
        assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")


def test_work_loop(world, owner, member, unchanged):
    create(owner, "First")
    r = owner.post("/api/v1/work/next", {}, format="json")
    assert r.status_code == 200
    claim = r.json()
    token = claim["claimToken"]
    assert claim["issue"]["identifier"] == "ACME-1" and claim["issue"]["status"] == "doing"
    assert (claim["branch"], claim["resumed"]) == ("acme-1/first", False)
    r = owner.get("/api/v1/issues/ACME-1/claim")
    assert r.status_code == 200 and r.json()["held"] is True and r.json()["youHold"] is True

    with unchanged():
        r = member.post("/api/v1/issues/ACME-1/claim", {}, format="json")
        assert (r.status_code, r.json()["code"]) == (409, "HELD")
        r = member.post("/api/v1/issues/ACME-1/checkpoint", {"note": "mine", "claimToken": token}, format="json")
        assert r.status_code == 403
        assert (r.json()["code"], r.json()["reason"]) == ("CLAIM_MISMATCH", "holder-only-writes")
        r = member.patch("/api/v1/issues/ACME-1", {"title": "hijack"}, format="json")
        assert (r.status_code, r.json()["code"], r.json()["reason"]) == (403, "CLAIM_MISMATCH", "holder-only-writes")
        r = owner.post("/api/v1/issues/ACME-1/heartbeat", {}, format="json")
        assert (r.status_code, r.json()["code"], r.json()["field"]) == (400, "INVALID_ARGUMENT", "claimToken")

    r = owner.post("/api/v1/issues/ACME-1/heartbeat", {"claimToken": token}, format="json")
    assert r.status_code == 200
    r = owner.post("/api/v1/issues/ACME-1/checkpoint", {"note": "half done", "claimToken": token}, format="json")
    assert r.status_code == 200
    r = owner.post("/api/v1/issues/ACME-1/release", {"claimToken": token, "note": "stopping"}, format="json")
    assert r.status_code == 200
    r = member.post("/api/v1/issues/ACME-1/claim", {}, format="json")
    assert r.status_code == 200
    assert (r.json()["resumed"], r.json()["checkpoint"], r.json()["checkpointBy"]) == (True, "stopping", world.owner.email)

    r = owner.post("/api/v1/work/next", {}, format="json")
    assert r.status_code == 200 and r.json()["issue"] is None and r.json()["ready"] == 0


def test_blocked_claim_names_its_blockers(world, owner, unchanged):
    create(owner, "Blocker")
    create(owner, "Blocked", blockedBy=["ACME-1"])
    with unchanged():
        r = owner.post("/api/v1/issues/ACME-2/claim", {}, format="json")
    assert (r.status_code, r.json()["code"]) == (409, "BLOCKED")
    assert "ACME-1" in json.dumps(r.json()["blockers"])


def test_batch_peek_and_claim(world, owner):
    for n in range(3):
        create(owner, f"Task {n}")
    r = owner.post("/api/v1/work/batch", {"n": 2}, format="json")
    assert r.status_code == 200 and len(r.json()["issues"]) == 2
    r = owner.post("/api/v1/work/batch", {"n": 3, "claim": True}, format="json")
    assert r.status_code == 200 and len(r.json()["claims"]) == 3
    assert all(c["claimToken"] for c in r.json()["claims"])
    r = owner.post("/api/v1/work/batch", {"n": 99}, format="json")
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (400, "INVALID_ARGUMENT", "n")


def test_comments(world, owner, member, unchanged):
    create(owner)
    r = member.post("/api/v1/issues/ACME-1/comments", {"body": "Looks good"}, format="json")
    assert r.status_code == 201
    comment = r.json()
    assert (comment["body"], comment["author"], comment["issue"]) == ("Looks good", world.member.email, "ACME-1")
    r = owner.get("/api/v1/issues/ACME-1/comments")
    assert [c["id"] for c in r.json()["comments"]] == [comment["id"]]
    with unchanged():
        r = member.post(f"/api/v1/comments/{comment['id']}/retract", {}, format="json")
        assert (r.status_code, r.json()["field"]) == (400, "note")
        r = member.post("/api/v1/comments/not-a-uuid/retract", {"note": "x"}, format="json")
        assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
    r = member.post(f"/api/v1/comments/{comment['id']}/retract", {"note": "wrong issue"}, format="json")
    assert r.status_code == 200 and r.json()["retracted"] is True
    assert Comment.objects.filter(pk=comment["id"]).exists()  # never deleted


def test_relations(world, owner, unchanged):
    create(owner, "A")
    create(owner, "B")
    r = owner.post("/api/v1/issues/ACME-1/relations", {"targetId": "ACME-2", "type": "blocks"}, format="json")
    assert r.status_code == 200
    assert owner.get("/api/v1/issues/ACME-2").json()["blockedBy"] == ["ACME-1"]
    with unchanged():
        r = owner.post("/api/v1/issues/ACME-2/relations", {"targetId": "ACME-1", "type": "blocks"}, format="json")
        assert (r.status_code, r.json()["code"]) == (409, "CYCLE")
        r = owner.post("/api/v1/issues/ACME-2/relations", {"targetId": "ACME-1", "type": "likes"}, format="json")
        assert (r.status_code, r.json()["field"]) == (400, "type")
    r = owner.delete("/api/v1/issues/ACME-1/relations/blocks/ACME-2")
    assert r.status_code == 200 and r.json()["removed"] is True
    assert owner.get("/api/v1/issues/ACME-2").json()["blockedBy"] == []


def test_url_attachments(world, owner, unchanged):
    create(owner)
    r = owner.post("/api/v1/issues/ACME-1/attachments", {"url": "https://example.com/log.txt", "title": "log"}, format="json")
    assert r.status_code == 201
    att = r.json()
    assert (att["url"], att["title"], att["issue"]) == ("https://example.com/log.txt", "log", "ACME-1")
    assert owner.get("/api/v1/issues/ACME-1/attachments").json()["attachments"] == [att]
    assert owner.get(f"/api/v1/attachments/{att['id']}").json() == att
    with unchanged():
        r = owner.post("/api/v1/issues/ACME-1/attachments", {"url": "ftp://x"}, format="json")
        assert (r.status_code, r.json()["code"]) == (400, "INVALID_ARGUMENT")
    r = owner.post(f"/api/v1/attachments/{att['id']}/obsolete", {"reason": "stale"}, format="json")
    assert r.status_code == 200 and r.json()["obsolete"] is True
    with unchanged():
        r = owner.post(f"/api/v1/attachments/{att['id']}/obsolete", {"reason": "again"}, format="json")
        assert (r.status_code, r.json()["code"]) == (409, "CONFLICT")


def test_labels(world, owner):
    r = owner.post("/api/v1/labels", {"name": "bug", "color": "#FF0000"}, format="json")
    assert r.status_code == 200 and r.json() == {"name": "bug", "color": "#ff0000"}
    assert owner.get("/api/v1/labels").json() == {"labels": [{"name": "bug", "color": "#ff0000"}]}
    r = owner.post("/api/v1/labels", {"name": "bug", "color": "red"}, format="json")
    assert (r.status_code, r.json()["field"]) == (400, "color")


def test_members_admin_is_owner_only(world, owner, member, unchanged):
    r = owner.get("/api/v1/members", {"query": "member"})
    assert [m["email"] for m in r.json()["members"]] == [world.member.email]
    member_id = r.json()["members"][0]["memberId"]
    with unchanged():
        r = member.post(f"/api/v1/members/{world.owner.email}/suspend")
        assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN")
    r = owner.post(f"/api/v1/members/{member_id}/suspend")
    assert r.status_code == 200 and r.json()["status"] == "suspended" and r.json()["keysRetired"] == 1
    r = owner.post(f"/api/v1/members/{member_id}/reactivate")
    assert r.status_code == 200 and r.json()["status"] == "active"
    r = owner.post(f"/api/v1/members/{member_id}/retire")
    assert r.status_code == 200 and r.json()["status"] == "retired"


def test_connectors(world, owner):
    assert owner.get("/api/v1/connectors").json() == {"connectors": []}
    r = owner.post("/api/v1/connectors/7/revoke")
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")  # more in tests/intake/


def test_observability(world, owner):
    create(owner)
    r = owner.get("/api/v1/queue")
    assert r.status_code == 200 and r.json()["project"] == "ACME" and r.json()["ready"] == 1
    assert owner.get("/api/v1/projects").json()["projects"][0]["prefix"] == "ACME"
    r = owner.get("/api/v1/projects/acme")
    assert r.status_code == 200 and r.json()["open"] == 1
    assert owner.get("/api/v1/projects/NOPE").json()["code"] == "NOT_FOUND"
    assert owner.get("/api/v1/usage").status_code == 200
    r = owner.get("/api/v1/billing")
    assert r.status_code == 200 and isinstance(r.json()["balanceMicros"], int)


def test_session_key_mint(world, owner):
    r = owner.post("/api/v1/session-keys", {"label": "tab 2"}, format="json")
    assert r.status_code == 201
    assert r.json()["label"] == "tab 2"
    r = client(r.json()["agentKey"]).get("/api/v1/whoami")
    assert r.status_code == 200 and r.json()["key"]["session"] is True
    assert r.json()["principal"]["email"] == world.owner.email


def test_a_human_cannot_mint_a_session_key(world):
    from rest_framework.test import APIClient

    c = APIClient()
    c.force_login(world.owner)
    r = c.post("/api/v1/session-keys", {}, format="json")
    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN")


# --- pagination -------------------------------------------------------------------------


def test_cursor_pagination_round_trip(world, owner):
    made = [create(owner, f"Issue {n}")["identifier"] for n in range(5)]
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        r = owner.get("/api/v1/issues", params)
        assert r.status_code == 200
        pages += 1
        seen += [i["identifier"] for i in r.json()["issues"]]
        cursor = r.json()["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(made))  # newest first, each once


def test_list_filters(world, owner):
    create(owner, "Low", priority=4)
    create(owner, "Urgent", priority=1, labels=["hot"])
    assert [i["title"] for i in owner.get("/api/v1/issues", {"priority": 1}).json()["issues"]] == ["Urgent"]
    assert [i["title"] for i in owner.get("/api/v1/issues", {"label": "hot"}).json()["issues"]] == ["Urgent"]
    assert [i["title"] for i in owner.get("/api/v1/issues?status=todo&status=done").json()["issues"]] == ["Urgent", "Low"]
    assert owner.get("/api/v1/issues", {"status": "done"}).json() == {"issues": [], "nextCursor": None}
    r = owner.get("/api/v1/issues", {"cursor": "garbage"})
    assert (r.status_code, r.json()["field"]) == (400, "cursor")
    r = owner.get("/api/v1/issues", {"limit": 0})
    assert (r.status_code, r.json()["field"]) == (400, "limit")


# --- one serializer: HTTP answers what the operation (and so the MCP tool) answers -------


@pytest.mark.parametrize(
    ("url", "tool", "args"),
    [
        ("/api/v1/issues/ACME-1", "get_issue", {"identifier": "ACME-1"}),
        ("/api/v1/issues?limit=1", "list_issues", {"limit": "1"}),
        ("/api/v1/issues/ACME-1/activity", "get_activity", {"identifier": "ACME-1"}),
        ("/api/v1/issues/ACME-1/comments", "list_comments", {"issue": "ACME-1"}),
        ("/api/v1/whoami", "whoami", {}),
        ("/api/v1/labels", "list_labels", {}),
        ("/api/v1/queue", "queue_status", {}),
        ("/api/v1/projects/ACME", "get_project", {"prefix": "ACME"}),
        ("/api/v1/members", "list_members", {}),
    ],
)
def test_http_and_operations_answer_the_same(world, owner, clock, url, tool, args):
    create(owner, "Shared", labels=["x"], dueAt="2030-01-01")
    create(owner, "Other")
    owner.post("/api/v1/work/next", {}, format="json")
    owner.post("/api/v1/issues/ACME-1/comments", {"body": "c"}, format="json")
    over_http = owner.get(url).json()
    direct = getattr(operations, tool)(world.a, **args)
    assert over_http == json.loads(json.dumps(direct))


def test_http_create_matches_what_get_issue_answers(world, owner, clock):
    made = create(owner, "Same shape")
    assert made == operations.get_issue(world.a, identifier="ACME-1")
    assert Issue.objects.filter(org=world.org).count() == 1
