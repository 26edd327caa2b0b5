"""`retasc mcp`: the stdio MCP server, driven by the SDK's own stdio client against a live
Daphne. It lists the server's tools, runs the work loop there (the rows change in the
server's database, not through any database of its own), passes refusals through
unchanged, and takes its key from the folder's binding or RETASC_KEY."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from apps.tools.operations import TOOLS
from tests.cli.conftest import RETASC
from tests.conftest import new_issue

pytestmark = [pytest.mark.slow]


def run_stdio(folder: Path, env: dict, work):
    async def go():
        from mcp.client.client import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=str(RETASC), args=["mcp"], env=env, cwd=folder)
        async with Client(stdio_client(params), mode="legacy") as client:
            return await work(client)

    return asyncio.run(go())


def payload(result) -> dict:
    return {"error": result.is_error, **json.loads(result.content[0].text)}


@pytest.fixture
def env(live_cli, tmp_path):
    # No personal sign-in and no binding unless a test writes one.
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "RETASC_SERVER": live_cli.base, "PATH": os.environ["PATH"]}


def test_stdio_serves_the_servers_tools_and_the_work_loop(live_cli, tworld, tmp_path, env):
    new_issue(tworld.a, "Over stdio", acceptance=["tests"])

    async def work(client):
        tools = await client.list_tools()
        who = payload(await client.call_tool("whoami", {}))
        claim = payload(await client.call_tool("next_issue", {}))
        token = claim["claimToken"]
        cp = payload(
            await client.call_tool("checkpoint", {"identifier": "ACME-1", "note": {"next": "finish"}, "claimToken": token})
        )
        refused = payload(await client.call_tool("save_issue", {"identifier": "ACME-1", "status": "done", "claimToken": token}))
        done = payload(
            await client.call_tool(
                "save_issue", {"identifier": "ACME-1", "status": "done", "evidence": ["3 passed"], "claimToken": token}
            )
        )
        return tools, who, claim, cp, refused, done

    tools, who, claim, cp, refused, done = run_stdio(tmp_path, {**env, "RETASC_KEY": tworld.owner_agent.raw}, work)
    assert [t.name for t in tools.tools] == list(TOOLS)  # the server's own list
    assert (who["principal"]["email"], who["runtime"]) == (tworld.owner.email, "claude-code")
    assert claim["issue"]["identifier"] == "ACME-1"
    assert cp["handoff"]["next"] == "finish"
    assert (refused["error"], refused["code"]) == (True, "ACCEPTANCE_EVIDENCE_REQUIRED")
    assert done["status"] == "done"
    from apps.issues.models import Issue

    assert Issue.objects.get(project=tworld.project, number=1).status == "done"


def test_stdio_takes_the_folders_binding(live_cli, tworld, tmp_path, env):
    from retasc.cli import config

    folder = tmp_path / "repo"
    folder.mkdir()
    key = tworld.member_agent.actor.key
    binding = config.Binding(
        folder=folder,
        server=live_cli.base,
        org=tworld.org.slug,
        project="ACME",
        runtime="codex",
        key_prefix=key.prefix,
        key_id=key.pk,
    )
    config.write_binding(binding, tworld.member_agent.raw)

    async def work(client):
        return payload(await client.call_tool("whoami", {}))

    who = run_stdio(folder, env, work)
    assert (who["principal"]["email"], who["runtime"]) == (tworld.member.email, "codex")


def test_stdio_without_a_key_says_so(live_cli, tmp_path, env):
    import subprocess

    proc = subprocess.run([str(RETASC), "mcp"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, input="")
    assert proc.returncode == 5
    assert proc.stderr.strip() == "Error: No agent key: run retasc bind in this folder, or set RETASC_KEY."
    assert proc.stdout == ""


def test_stdio_with_a_revoked_key_says_so(live_cli, tworld, tmp_path, env):
    import subprocess

    proc = subprocess.run(
        [str(RETASC), "mcp"],
        cwd=tmp_path,
        env={**env, "RETASC_KEY": "rtsc_00000000_nope"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert "refused this agent key (UNAUTHORIZED)" in proc.stderr
