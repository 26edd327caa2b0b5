"""Real third-party MCP clients against the live server: the MCP Inspector CLI and the
official conformance suite (both from npm, cached under ``node_modules/.mcp-tools``, which
git ignores). Skipped, with the reason, when node/npx is missing or the install fails.

The conformance suite has no way to send a bearer key, so it runs against a second server
started with ``RETASC_MCP_ANONYMOUS_DISCOVERY=true`` (test instances only): initialize,
ping and tools/list answer without a key, while every tool call still needs one.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from apps.tools.operations import TOOLS
from tests.live import ROOT, start_daphne

pytestmark = pytest.mark.slow
TOOLS_DIR = ROOT / "node_modules" / ".mcp-tools"
PACKAGES = ("@modelcontextprotocol/inspector@2.12.0", "@modelcontextprotocol/conformance@0.1.11")


@pytest.fixture(scope="session")
def npx():
    node, npx_bin = shutil.which("node"), shutil.which("npx")
    if not node or not npx_bin:
        pytest.skip("node/npx is not installed: the MCP Inspector and conformance checks need Node 20+")
    bins = TOOLS_DIR / "node_modules" / ".bin"
    if not (bins / "mcp-inspector").exists() or not (bins / "conformance").exists():
        TOOLS_DIR.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(TOOLS_DIR), *PACKAGES],
                cwd=TOOLS_DIR,
                check=True,
                capture_output=True,
                timeout=600,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            pytest.skip(f"could not install {', '.join(PACKAGES)} from npm: {exc}")
    return npx_bin


@pytest.fixture(scope="module")
def anonymous_mcp(django_db_setup, tmp_path_factory):
    server = start_daphne(tmp_path_factory.mktemp("daphne-anon"), RETASC_MCP_ANONYMOUS_DISCOVERY="true")
    yield server
    server.stop()


def run_npx(npx: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [npx, "--no-install", *args],
        cwd=TOOLS_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def inspector(npx: str, url: str, key: str, *args: str, exit_code: int = 0) -> dict:
    done = run_npx(npx, "mcp-inspector", "--cli", url, "--transport", "http", "--header", f"Authorization: Bearer {key}", *args)
    assert done.returncode == exit_code, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_inspector_cli_lists_tools_and_calls_whoami(npx, live_mcp, tworld):
    listed = inspector(npx, live_mcp.mcp_url, tworld.owner_agent.raw, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == list(TOOLS)

    called = inspector(npx, live_mcp.mcp_url, tworld.owner_agent.raw, "--method", "tools/call", "--tool-name", "whoami")
    assert not called.get("isError")
    assert called["structuredContent"]["principal"]["email"] == tworld.owner.email
    assert json.loads(called["content"][0]["text"]) == called["structuredContent"]

    refused = inspector(
        npx,
        live_mcp.mcp_url,
        tworld.owner_agent.raw,
        "--method",
        "tools/call",
        "--tool-name",
        "get_issue",
        "--tool-arg",
        "identifier=ACME-404",
        exit_code=5,
    )  # 5: tool isError
    assert refused["isError"] is True and refused["structuredContent"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize("scenario", ["server-initialize", "ping", "tools-list"])
def test_conformance_scenarios(npx, anonymous_mcp, scenario):
    done = run_npx(npx, "conformance", "server", "--url", anonymous_mcp.mcp_url, "--scenario", scenario, timeout=180)
    output = done.stdout + done.stderr
    print(output[-3000:])
    assert done.returncode == 0 and "Passed: 1/1, 0 failed" in output, output


def test_anonymous_discovery_still_refuses_every_tool_call(anonymous_mcp, tworld):
    import asyncio

    from tests.mcp.conftest import mcp_client, refusal

    async def scenario():
        async with mcp_client(anonymous_mcp.mcp_url) as client:  # no key at all
            assert len((await client.list_tools()).tools) == len(TOOLS)
            return await refusal(client, "whoami"), await refusal(client, "list_issues")

    for body in asyncio.run(scenario()):
        assert body == {"code": "UNAUTHORIZED", "message": "Missing, unknown or revoked agent key."}
