"""The whole path against a live Daphne (in-process jobs on) and the fake GitHub:
sign, deliver, quarantine, sign off, claim over MCP, done, and the source issue closed
on the fake, once; the same through the CLI's connector commands."""

from __future__ import annotations

import asyncio
import json
import time

import httpx2
import pytest
from django.test import Client

from apps.intake.models import Connector, WritebackJob
from apps.issues.models import Issue
from tests.cli.conftest import Cli
from tests.fakes.github import FakeGitHub
from tests.intake.hooks import payload, sign
from tests.mcp.conftest import call, mcp_client, refusal

pytestmark = pytest.mark.slow


def _deliver(base: str, created: dict, event: str, data: dict, delivery: str) -> httpx2.Response:
    body = json.dumps(data).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(created["secret"], body),
    }
    return httpx2.post(f"{base}/hooks/github/{created['connectorId']}", content=body, headers=headers, timeout=30)


def test_deliver_triage_claim_finish_and_close_at_source(server_factory, tworld, tmp_path):
    fake = FakeGitHub().start()
    fake.add_issue("octocat/Hello-World", 1347)
    server = server_factory(RETASC_INPROCESS_JOBS="true", RETASC_RECLAIM_INTERVAL_SECONDS="30")
    try:
        # The owner connects the repository with the CLI (personal token, HTTP API).
        cli = Cli(server=server.base, config_home=tmp_path / "config", folder=tmp_path)
        cli.sign_in_as(tworld.owner)
        token_file = tmp_path / "token"
        token_file.write_text(fake.token)
        created = cli.json(
            "connector", "add", "--provider", "github", "--repo", "octocat/Hello-World", "--project", "ACME",
            "--token-file", str(token_file), "--api-url", fake.url,
        )  # fmt: skip
        assert created["webhookUrl"] == f"{server.base}/hooks/github/{created['connectorId']}"

        # Signed deliveries over HTTP: ping, then the issue.
        assert _deliver(server.base, created, "ping", payload("github", "ping"), "d-ping").status_code == 202
        r = _deliver(server.base, created, "issues", payload("github", "issues-opened"), "d-open")
        assert (r.status_code, r.json()["issue"]) == (202, "ACME-1")
        assert _deliver(server.base, created, "issues", payload("github", "issues-opened"), "d-open").status_code == 200
        bad = {**created, "secret": "wrong"}
        assert _deliver(server.base, bad, "issues", payload("github", "issues-opened"), "d-bad").status_code == 401

        async def agent_sees_quarantine():
            async with mcp_client(server.mcp_url, tworld.owner_agent.raw) as a:
                empty = await call(a, "next_issue")
                assert empty["issue"] is None and empty["awaitingTriage"] == 1
                assert (await refusal(a, "claim_issue", identifier="ACME-1"))["code"] == "AWAITING_TRIAGE"
                listed = (await call(a, "list_connectors"))["connectors"]
                assert [(c["repo"], c["live"], c["counts"]["issues"]) for c in listed] == [("octocat/Hello-World", True, 1)]

        asyncio.run(agent_sees_quarantine())

        # A person signs it off in the Dash.
        browser = Client()
        browser.force_login(tworld.owner)
        page = browser.get("/issues/ACME-1/")
        assert b'id="triage-accept"' in page.content
        done = browser.post("/issues/ACME-1/triage/", {"decision": "accept"})
        assert done.status_code == 302 and Issue.objects.get(number=1, project=tworld.project).awaiting_triage is False

        async def agent_works_it():
            async with mcp_client(server.mcp_url, tworld.owner_agent.raw) as a:
                claim = await call(a, "next_issue")
                assert claim["issue"]["identifier"] == "ACME-1" and claim["issue"]["labels"] == ["bug", "support"]
                finished = await call(a, "save_issue", identifier="ACME-1", status="done", claimToken=claim["claimToken"])
                assert finished["status"] == "done"

        asyncio.run(agent_works_it())

        deadline = time.monotonic() + 30  # the in-process runner, woken after commit
        while not WritebackJob.objects.filter(state="done").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        upstream = fake.issue("octocat/Hello-World", 1347)
        assert (upstream["state"], upstream["state_reason"]) == ("closed", "completed"), server.log()
        assert len(upstream["comments"]) == 1 and "ACME-1" in upstream["comments"][0]["body"]
        assert list(WritebackJob.objects.values_list("state", flat=True)) == ["done"]
        time.sleep(1)
        assert len(fake.seen("PATCH")) == 1  # closed once

        listed = cli.json("connector", "list")["connectors"]
        assert listed[0]["counts"] == {"deliveries": 2, "issues": 1, "writebacks": 1}
        revoked = cli.json("connector", "revoke", created["connectorId"], "--yes")
        assert revoked["revokedAt"] and Connector.objects.get().revoked_at is not None
        assert _deliver(server.base, created, "ping", payload("github", "ping"), "d-late").status_code == 410
        refused = cli("connector", "revoke", "00000000-0000-4000-8000-000000000000", "--yes")
        assert refused.exit_code == 1 and "NOT_FOUND" in refused.stderr
    finally:
        fake.stop()
