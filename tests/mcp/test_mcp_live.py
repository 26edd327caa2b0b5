"""The MCP server end to end: real HTTP, a live Daphne, the SDK's own client (SPEC §5).

Given the ``tworld`` personas (owner and member of Acme, an outsider in Globex, each with
a real agent key), when agents talk to /mcp, then the answers are SPEC §15 JSON and every
refusal is a tool error carrying ``{code, message, ...}``.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from apps.tools.operations import TOOLS
from tests.conftest import snapshot
from tests.mcp.conftest import call, mcp_client, refusal

pytestmark = pytest.mark.slow
MODES = ("legacy", "auto")
LEGACY_VERSION = "2025-06-18"


def run(coro):
    return asyncio.run(coro)


def post(url: str, body: dict | bytes, *, key: str | None = None, headers: dict | None = None):
    """A raw JSON-RPC POST; returns (status, headers, body bytes)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LEGACY_VERSION,
            **({"Authorization": f"Bearer {key}"} if key else {}),
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def initialize_body() -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }


# --- discovery ------------------------------------------------------------------------


def test_tools_list_is_complete_and_small(live_mcp, tworld):
    status, _, body = post(live_mcp.mcp_url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, key=tworld.owner_agent.raw)
    assert status == 200
    print(f"\ntools/list response: {len(body)} bytes for {len(json.loads(body)['result']['tools'])} tools")
    assert len(body) <= 12 * 1024
    tools = {t["name"]: t for t in json.loads(body)["result"]["tools"]}
    assert list(tools) == list(TOOLS)
    assert set(tools["save_issue"]["inputSchema"]["properties"]) == {
        "identifier",
        "title",
        "body",
        "work",
        "blockedBy",
        "noDependency",
        "status",
        "assignee",
        "priority",
        "dueAt",
        "labels",
        "acceptance",
        "evidence",
        "cancelReason",
        "parent",
        "claimToken",
    }
    assert set(tools["list_issues"]["inputSchema"]["properties"]) == {
        "query",
        "status",
        "priority",
        "label",
        "author",
        "assignee",
        "slaState",
        "limit",
        "cursor",
    }
    assert tools["add_relation"]["inputSchema"]["required"] == ["sourceId", "targetId", "type"]
    assert tools["checkpoint"]["inputSchema"]["required"] == ["identifier", "note", "claimToken"]
    assert tools["get_issue"]["annotations"]["readOnlyHint"] is True


def test_well_known_describes_the_endpoint(live_mcp, tworld):
    with urllib.request.urlopen(f"{live_mcp.base}/.well-known/mcp.json", timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["url"] == live_mcp.mcp_url
    assert doc["transport"] == "streamable-http"
    assert doc["auth"]["type"] == "bearer"
    assert doc["sessions"] == "stateless"


def test_transport_is_stateless_json_and_guarded(live_mcp, tworld):
    key = tworld.owner_agent.raw
    status, headers, body = post(live_mcp.mcp_url, initialize_body(), key=key)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert headers.get("mcp-session-id") is None  # stateless: any process can answer the next request
    assert json.loads(body)["result"]["serverInfo"]["name"] == "retasc"
    # DNS-rebinding protection follows ALLOWED_HOSTS; oversized bodies are refused.
    assert post(live_mcp.mcp_url, initialize_body(), key=key, headers={"Host": "evil.example"})[0] == 421
    assert post(live_mcp.mcp_url, b"{" + b" " * (3 * 1024 * 1024) + b"}", key=key)[0] == 413


# --- authentication -------------------------------------------------------------------


def test_every_authentication_failure_is_one_unauthorized(live_mcp, tworld):
    from apps.leases.revocation import agent_key_revoke

    revoked = tworld.member_agent
    agent_key_revoke(key=revoked.actor.key)
    answers = [
        post(live_mcp.mcp_url, initialize_body()),  # no key
        post(live_mcp.mcp_url, initialize_body(), key="rtsc_00000000_not-a-key"),
        post(live_mcp.mcp_url, initialize_body(), key="garbage"),
        post(live_mcp.mcp_url, initialize_body(), key=revoked.raw),
        post(live_mcp.mcp_url, initialize_body(), headers={"Authorization": "Basic dXNlcjpwYXNz"}),
    ]
    for status, headers, body in answers:
        assert status == 401
        assert headers["WWW-Authenticate"].startswith("Bearer")
        # OAuth-only clients learn where to sign in (SPEC §5); key holders never get here.
        assert f'resource_metadata="{live_mcp.base}/.well-known/oauth-protected-resource/mcp"' in headers["WWW-Authenticate"]
        assert json.loads(body) == {"code": "UNAUTHORIZED", "message": "Missing, unknown or revoked agent key."}


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_client_is_refused_without_a_valid_key(live_mcp, tworld, mode):
    async def connect(key, statuses):
        async with mcp_client(live_mcp.mcp_url, key, mode=mode, statuses=statuses) as client:
            await client.list_tools()

    for key in (None, "rtsc_nope_nope"):
        statuses: list[int] = []
        with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in task-group errors; the status is asserted
            run(connect(key, statuses))
        assert statuses and set(statuses) == {401}


def test_a_key_revoked_mid_session_stops_at_the_next_call(live_mcp, tworld):
    from apps.leases.revocation import member_suspend

    statuses: list[int] = []

    async def scenario():
        async with mcp_client(live_mcp.mcp_url, tworld.member_agent.raw, statuses=statuses) as member:
            assert (await call(member, "whoami"))["principal"]["email"] == tworld.member.email
            await asyncio.to_thread(member_suspend, actor=tworld.a, member_id=tworld.member.email)
            with pytest.raises(Exception):  # noqa: B017 - as above; the 401 is asserted below
                await call(member, "whoami")

    try:
        run(scenario())
    except Exception:  # closing the refused client may raise too
        pass
    assert statuses[0] == 200 and 401 in statuses


# --- the agent loop -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_whole_agent_loop(live_mcp, tworld, mode):
    owner, member = tworld.owner_agent.raw, tworld.member_agent.raw

    async def scenario():
        async with mcp_client(live_mcp.mcp_url, owner, mode=mode) as a, mcp_client(live_mcp.mcp_url, member, mode=mode) as b:
            me = await call(a, "whoami")
            assert me["principal"]["email"] == tworld.owner.email and me["runtime"] == "claude-code"
            assert me["org"]["slug"] == tworld.org.slug and me["project"]["prefix"] == "ACME"
            assert (await call(a, "mint_session_key", label="tab 2"))["label"] == "tab 2"

            schema = await call(a, "save_issue", title="Schema", work=True, noDependency="first step", priority=3)
            feature = await call(
                a,
                "save_issue",
                title="Feature",
                work=True,
                blockedBy=[schema["identifier"]],
                acceptance=["tests pass"],
                body="Build **it**.",
            )
            assert schema["identifier"] == "ACME-1" and schema["status"] == "todo" and schema["claim"] is None
            assert feature["blockedByOpen"] == ["ACME-1"] and feature["acceptance"] == ["tests pass"]
            assert (await call(a, "get_issue", identifier="ACME-1"))["blocks"] == ["ACME-2"]

            # Pull: the blocker comes first (the feature is blocked).
            claim = await call(a, "next_issue")
            token = claim["claimToken"]
            assert claim["issue"]["identifier"] == "ACME-1" and claim["issue"]["status"] == "doing"
            assert claim["issue"]["claim"]["youHold"] is True and claim["branch"] == "acme-1/schema"
            assert claim["resumed"] is False and claim["checkpoint"] is None
            beat = await call(a, "heartbeat", identifier="ACME-1", claimToken=token)
            assert beat["claimExpiresAt"] >= claim["claimExpiresAt"]
            await call(a, "checkpoint", identifier="ACME-1", note="tables drafted", claimToken=token)
            released = await call(a, "release_issue", identifier="ACME-1", claimToken=token)
            assert released == {"identifier": "ACME-1", "status": "todo", "released": True}

            # Claim again: the handoff comes back.
            again = await call(a, "claim_issue", identifier="ACME-1")
            assert again["resumed"] is True and again["checkpoint"] == "tables drafted"
            assert again["checkpointBy"] == tworld.owner.email and again["reclaimCount"] == 0
            done = await call(a, "save_issue", identifier="ACME-1", status="done", claimToken=again["claimToken"])
            assert done["status"] == "done" and done["claim"] is None and done["checkpoint"] is None

            # The feature is unblocked; finishing needs evidence, review needs a reviewer.
            work = await call(a, "next_issue")
            assert work["issue"]["identifier"] == "ACME-2" and work["issue"]["blockedByOpen"] == []
            ft = work["claimToken"]
            missing = await refusal(a, "save_issue", identifier="ACME-2", status="done", claimToken=ft)
            assert missing["code"] == "ACCEPTANCE_EVIDENCE_REQUIRED"
            assert missing["missing"] == [{"index": 0, "number": 1, "criterion": "tests pass"}]
            await call(a, "checkpoint", identifier="ACME-2", note="ready for review: see PR 7", claimToken=ft)
            review = await call(
                a,
                "save_issue",
                identifier="ACME-2",
                status="review",
                assignee=tworld.member.email,
                evidence=["pytest green"],
                claimToken=ft,
            )
            assert review["status"] == "review" and review["assignee"] == tworld.member.email and review["claim"] is None

            # The author cannot review; another principal claims and approves.
            assert (await refusal(a, "claim_issue", identifier="ACME-2"))["code"] == "AUTHOR_CANNOT_REVIEW"
            assert (await call(a, "next_issue"))["issue"] is None
            rv = await call(b, "next_issue")
            assert rv["issue"]["identifier"] == "ACME-2" and rv["issue"]["status"] == "review"
            assert rv["checkpoint"] == "ready for review: see PR 7" and rv["resumed"] is True
            approved = await call(b, "save_issue", identifier="ACME-2", status="done", claimToken=rv["claimToken"])
            assert approved["status"] == "done" and approved["evidence"] == ["pytest green"]

            verbs = [e["verb"] for e in (await call(b, "get_activity", identifier="ACME-2"))["activity"]]
            assert verbs[0] == "created" and verbs[-3:] == ["review_requested", "review_claimed", "review_approved"]
            listed = await call(a, "list_issues", status="done")
            assert [i["identifier"] for i in listed["issues"]] == ["ACME-2", "ACME-1"] and listed["nextCursor"] is None
            queue = await call(a, "queue_status")
            assert queue["ready"] == 0 and queue["byStatus"] == {"done": 2}

    run(scenario())


def test_collaboration_tools(live_mcp, tworld):
    async def scenario():
        async with mcp_client(live_mcp.mcp_url, tworld.owner_agent.raw) as a:
            one = await call(a, "save_issue", title="One", work=True, noDependency="x", labels=["bug"])
            two = await call(a, "save_issue", title="Two", work=True, noDependency="x")
            comment = await call(a, "save_comment", identifier=one["identifier"], body="looks odd")
            retracted = await call(a, "retract_comment", comment=comment["id"], note="wrong issue")
            assert retracted["retracted"] is True and retracted["retractNote"] == "wrong issue"
            assert [c["id"] for c in (await call(a, "list_comments", identifier="ACME-1"))["comments"]] == [comment["id"]]
            rel = await call(a, "add_relation", sourceId=one["identifier"], targetId=two["identifier"], type="related")
            assert rel["created"] is True
            assert (await call(a, "remove_relation", sourceId="ACME-1", targetId="ACME-2", type="related"))["removed"] is True
            assert await call(a, "save_label", name="infra", color="#112233") == {"name": "infra", "color": "#112233"}
            assert [lb["name"] for lb in (await call(a, "list_labels"))["labels"]] == ["bug", "infra"]
            att = await call(a, "save_attachment", identifier="ACME-1", url="https://example.com/log.txt", title="log")
            assert (await call(a, "get_attachment", attachment=att["id"]))["url"] == "https://example.com/log.txt"
            gone = await call(a, "obsolete_attachment", attachment=att["id"], reason="superseded")
            assert gone["obsolete"] is True
            assert [x["id"] for x in (await call(a, "list_attachments", identifier="ACME-1"))["attachments"]] == [att["id"]]
            upload = await call(a, "prepare_attachment_upload", identifier="ACME-1")
            assert upload["method"] == "PUT" and upload["uploadUrl"].startswith(live_mcp.base)
            emails = [m["email"] for m in (await call(a, "list_members"))["members"]]
            assert emails == sorted([tworld.owner.email, tworld.member.email])
            assert (await call(a, "get_project"))["prefix"] == "ACME"
            assert [p["prefix"] for p in (await call(a, "list_projects"))["projects"]] == ["ACME"]
            assert await call(a, "list_connectors") == {"connectors": []}
            assert (await refusal(a, "revoke_connector", connectorId="c1"))["code"] == "NOT_FOUND"
            batch = await call(a, "next_batch", n=5)
            assert [i["identifier"] for i in batch["issues"]] == ["ACME-1", "ACME-2"]
            assert isinstance(await call(a, "usage_summary"), dict)
            assert isinstance(await call(a, "billing_summary"), dict)
            suspended = await call(a, "suspend_member", memberId=tworld.member.email)
            assert suspended["status"] == "suspended"
            assert (await call(a, "reactivate_member", memberId=tworld.member.email))["status"] == "active"

    run(scenario())


# --- lanes, refusals, isolation -------------------------------------------------------


def test_lanes(live_mcp, tworld):
    async def scenario():
        async with (
            mcp_client(live_mcp.mcp_url, tworld.owner_agent.raw) as a,
            mcp_client(live_mcp.mcp_url, tworld.member_agent.raw, mode="auto") as b,
        ):
            await call(a, "save_issue", title="Member's", work=True, noDependency="x", assignee=tworld.member.email)
            empty = await call(a, "next_issue")
            assert empty["issue"] is None and empty["ready"] == 0 and empty["otherLanes"] == 1
            assert {"blocked", "claimed", "awaitingTriage"} <= set(empty)
            mine = await call(b, "next_issue")
            assert mine["issue"]["identifier"] == "ACME-1" and mine["issue"]["assignee"] == tworld.member.email
            await call(a, "save_issue", title="Also member's", work=True, noDependency="x", assignee=tworld.member.email)
            wide = await call(a, "next_issue", allLanes=True)
            assert wide["issue"]["identifier"] == "ACME-2"

    run(scenario())


def test_refusals_are_tool_errors_with_json_and_change_nothing(live_mcp, tworld):
    async def scenario():
        async with (
            mcp_client(live_mcp.mcp_url, tworld.owner_agent.raw) as a,
            mcp_client(live_mcp.mcp_url, tworld.member_agent.raw) as b,
        ):
            await call(a, "save_issue", title="Blocker", work=True, noDependency="x")
            await call(a, "save_issue", title="Blocked", work=True, blockedBy=["ACME-1"])
            await call(a, "save_issue", title="Epic", work=False, noDependency="container")
            held = await call(a, "claim_issue", identifier="ACME-1")
            before = await asyncio.to_thread(snapshot)

            cases = {
                "INVALID_ARGUMENT": await refusal(a, "save_issue", work=True, noDependency="x"),
                "INVALID_ARGUMENT:missing": await refusal(a, "get_issue"),
                "INVALID_ARGUMENT:dependency": await refusal(a, "save_issue", title="No deps", work=True),
                "BLOCKED": await refusal(a, "claim_issue", identifier="ACME-2"),
                "NOT_WORK": await refusal(a, "claim_issue", identifier="ACME-3"),
                "HELD": await refusal(b, "claim_issue", identifier="ACME-1"),
                "CLAIM_MISMATCH": await refusal(b, "heartbeat", identifier="ACME-1", claimToken="rtclm_forged"),
                "CLAIM_MISMATCH:edit": await refusal(b, "save_issue", identifier="ACME-1", title="Mine now"),
                "CYCLE": await refusal(a, "add_relation", sourceId="ACME-2", targetId="ACME-1", type="blocks"),
                "FORBIDDEN": await refusal(b, "suspend_member", memberId=tworld.owner.email),
                "NOT_FOUND": await refusal(a, "get_issue", identifier="ACME-99"),
            }
            assert await asyncio.to_thread(snapshot) == before

            done = await call(a, "save_issue", identifier="ACME-1", status="done", claimToken=held["claimToken"])
            assert done["status"] == "done"
            cases["NOT_ELIGIBLE:done"] = await refusal(a, "claim_issue", identifier="ACME-1")
            cases["CLAIM_LOST"] = await refusal(a, "heartbeat", identifier="ACME-1", claimToken=held["claimToken"])
            return cases

    cases = run(scenario())
    for name, body in cases.items():
        assert body["code"] == name.split(":missing")[0].split(":dependency")[0].split(":edit")[0], (name, body)
        assert isinstance(body["message"], str) and body["message"]
    assert cases["INVALID_ARGUMENT"]["field"] == "title"
    assert cases["INVALID_ARGUMENT:missing"]["field"] == "identifier"
    assert cases["INVALID_ARGUMENT:dependency"]["field"] == "blockedBy"
    assert cases["BLOCKED"]["blockers"] == [{"identifier": "ACME-1", "status": "doing"}]
    assert cases["HELD"]["heldBy"] == tworld.owner.email
    assert cases["CLAIM_MISMATCH"]["reason"] == "holder-only-writes"
    assert cases["FORBIDDEN"]["tellHuman"] == "Ask an owner of the org."
    assert cases["NOT_ELIGIBLE:done"]["status"] == "done"


def test_other_orgs_read_as_not_found(live_mcp, tworld):
    async def scenario():
        async with (
            mcp_client(live_mcp.mcp_url, tworld.owner_agent.raw) as a,
            mcp_client(live_mcp.mcp_url, tworld.outsider_agent.raw, mode="auto") as x,
        ):
            await call(a, "save_issue", title="Acme secret", work=True, noDependency="x")
            for tool, args in [
                ("get_issue", {"identifier": "ACME-1"}),
                ("claim_issue", {"identifier": "ACME-1"}),
                ("save_comment", {"issue": "ACME-1", "body": "hi"}),
                ("get_activity", {"identifier": "ACME-1"}),
            ]:
                body = await refusal(x, tool, **args)
                assert body["code"] == "NOT_FOUND" and "Acme secret" not in json.dumps(body)
            assert (await call(x, "list_issues"))["issues"] == []
            assert (await call(x, "next_issue"))["issue"] is None
            assert (await call(x, "whoami"))["org"]["slug"] == tworld.other_org.slug

    run(scenario())


# --- the race ---------------------------------------------------------------------------


def test_24_clients_drain_one_project_every_issue_exactly_once(live_mcp, tworld):
    from apps.issues.models import Claim, Issue
    from apps.orgs.services import agent_key_mint
    from tests.conftest import new_issue

    issues = 72
    for n in range(issues):
        new_issue(tworld.a, f"Task {n}")
    keys = [
        agent_key_mint(org=tworld.org, user=user, project=tworld.project, runtime="ci", label=f"racer {i}")[1]
        for i, user in enumerate([tworld.owner, tworld.member] * 12)
    ]

    async def drain(key: str, mode: str, start: asyncio.Event) -> list[str]:
        got = []
        async with mcp_client(live_mcp.mcp_url, key, mode=mode) as client:
            await start.wait()
            while True:
                claim = await call(client, "next_issue")
                if claim["issue"] is None:
                    return got
                ident = claim["issue"]["identifier"]
                got.append(ident)
                await call(client, "save_issue", identifier=ident, status="done", claimToken=claim["claimToken"])

    async def race():
        start = asyncio.Event()
        tasks = [asyncio.create_task(drain(key, MODES[i % 2], start)) for i, key in enumerate(keys)]
        await asyncio.sleep(0.5)
        start.set()  # everyone connected: pull together
        return await asyncio.gather(*tasks)

    try:
        results = run(race())
    except BaseException:
        print("\n".join(line for line in live_mcp.log().splitlines() if "POST /mcp" not in line)[-20000:])
        raise
    taken = [ident for got in results for ident in got]
    assert len(taken) == issues and sorted(taken) == sorted(f"ACME-{n}" for n in range(1, issues + 1))
    assert sum(1 for got in results if got) > 1  # the work really was spread
    assert Issue.objects.filter(org=tworld.org, status="done").count() == issues
    assert Claim.objects.filter(org=tworld.org).count() == issues  # no double claim, none lost


# --- shutdown ---------------------------------------------------------------------------


def test_daphne_exits_on_sigterm_after_tools_ran(server_factory, tworld):
    import time

    server = server_factory()

    async def use():
        async with mcp_client(server.mcp_url, tworld.owner_agent.raw) as client:
            await call(client, "whoami")  # the key check and the tools ran on the MCP threads
            await call(client, "queue_status")
            await call(client, "save_issue", title="Written", work=True, noDependency="x")

    run(use())
    started = time.monotonic()
    code = server.stop(timeout=20)
    assert server.proc.poll() is not None, server.log()
    assert time.monotonic() - started < 15
    assert code in (0, -15), server.log()
