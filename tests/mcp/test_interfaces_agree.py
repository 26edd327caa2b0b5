"""MCP and the HTTP API agree with each other and say what went wrong (SPEC §5)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from apps.issues.models import Activity, Comment, Issue
from tests.mcp.conftest import call, mcp_client, refusal
from tests.mcp.test_mcp_live import post, run

pytestmark = pytest.mark.slow


def test_get_mcp_answers_405_at_once(live_mcp, tworld):
    request = urllib.request.Request(
        live_mcp.mcp_url,
        method="GET",
        headers={"Authorization": f"Bearer {tworld.owner_agent.raw}", "Accept": "text/event-stream"},
    )
    started = time.monotonic()
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 405 and time.monotonic() - started < 5
    assert caught.value.headers["Content-Type"] == "application/json"
    assert caught.value.headers["Allow"] == "POST"
    assert "Method Not Allowed" in json.loads(caught.value.read())["error"]["message"]


def test_unknown_arguments_are_refused_naming_them_and_change_nothing(live_mcp, tworld):
    async def scenario():
        async with mcp_client(live_mcp.mcp_url, tworld.owner_agent.raw) as a:
            refused = await refusal(a, "save_issue", title="Typo", work=True, noDependency="x", priorty=1)
            assert refused["code"] == "INVALID" and refused["field"] == "priorty"
            assert "priorty" in refused["message"] and "priority" in refused["message"]
            issue = await call(a, "save_issue", title="Real", work=True, noDependency="x")
            claim = await call(a, "claim_issue", identifier=issue["identifier"])
            # a misspelt token argument must not read as "no token given"
            refused = await refusal(a, "heartbeat", identifier=issue["identifier"], claimtoken=claim["claimToken"])
            assert refused["code"] == "INVALID" and refused["field"] == "claimtoken"

    before = Activity.objects.count()
    run(scenario())
    assert list(Issue.objects.filter(org=tworld.org).values_list("number", flat=True)) == [1]
    assert Activity.objects.count() - before == 2  # the create and the claim, nothing for the refusals


def test_save_issue_schema_marks_what_create_and_update_need(live_mcp, tworld):
    status, _, body = post(live_mcp.mcp_url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, key=tworld.owner_agent.raw)
    tools = {t["name"]: t for t in json.loads(body)["result"]["tools"]}
    assert tools["save_issue"]["inputSchema"]["anyOf"] == [
        {"required": ["identifier"]},
        {"required": ["title", "work", "blockedBy"]},
        {"required": ["title", "work", "noDependency"]},
    ]
    for name in ("save_comment", "list_comments", "save_attachment", "prepare_attachment_upload", "list_attachments"):
        assert "identifier" in tools[name]["inputSchema"]["properties"], name
        assert "issue" not in tools[name]["inputSchema"]["properties"], name


def test_comment_and_attachment_tools_take_identifier_and_still_accept_issue(live_mcp, tworld):
    async def scenario():
        async with mcp_client(live_mcp.mcp_url, tworld.owner_agent.raw) as a:
            one = await call(a, "save_issue", title="One", work=True, noDependency="x")
            ident = one["identifier"]
            await call(a, "save_comment", identifier=ident, body="new name")
            await call(a, "save_comment", issue=ident, body="old name")
            assert len((await call(a, "list_comments", issue=ident))["comments"]) == 2
            both = await refusal(a, "save_comment", identifier=ident, issue="ACME-99", body="which?")
            assert both["code"] == "INVALID_ARGUMENT"
            none = await refusal(a, "save_comment", body="where?")
            assert none["code"] == "INVALID_ARGUMENT" and none["field"] == "identifier"
            await call(a, "save_attachment", issue=ident, url="https://example.com/a.txt")
            assert len((await call(a, "list_attachments", identifier=ident))["attachments"]) == 1

    run(scenario())
    assert Comment.objects.filter(issue__org=tworld.org).count() == 2
