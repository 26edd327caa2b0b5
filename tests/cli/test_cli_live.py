"""`retasc` end to end against a live Daphne: device-flow login, bind, the written
.mcp.json driving the SDK's MCP client, join, doctor, next / issue, and a stopped server."""

from __future__ import annotations

import asyncio
import json
import re
import stat
import subprocess
import time

import pytest
from django.test import Client

from apps.orgs.models import AgentKey
from tests.conftest import new_issue
from tests.mcp.conftest import call, free_port, mcp_client

pytestmark = pytest.mark.slow


def _approve(user, code: str) -> str:
    """A signed-in human approves ``code`` on /device/ (CSRF enforced, as in a browser)."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    page = browser.get("/device/", {"code": code})
    assert page.status_code == 200, page.content
    assert b"retasc CLI on" in page.content  # what is asking is shown
    assert browser.post("/device/", {"code": code, "decision": "approve"}).status_code == 403  # no CSRF token
    csrf = browser.cookies["csrftoken"].value
    done = browser.post("/device/", {"code": code, "decision": "approve", "csrfmiddlewaretoken": csrf})
    assert done.status_code == 200 and b'data-result="approved"' in done.content
    return code


def test_login_through_the_device_flow(tworld, cli):
    proc = cli.popen("login", "--no-browser")
    code, seen = None, ""
    deadline = time.monotonic() + 30
    while code is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        found = re.search(r"\b([B-Z]{4}-[B-Z]{4})\b", line)
        code = found.group(1) if found else None
    assert code, seen
    _approve(tworld.owner, code)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, seen + stderr
    assert f"Signed in to {cli.server} as {tworld.owner.email}." in stdout

    creds = cli.config_home / "retasc" / "credentials.json"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    stored = json.loads(creds.read_text())["servers"][cli.server]
    assert stored["token"].startswith("rtscpat_") and stored["email"] == tworld.owner.email

    me = cli.json("whoami")
    assert me["user"]["email"] == tworld.owner.email
    assert [o["slug"] for o in me["user"]["orgs"]] == [tworld.org.slug]

    # Without --server or RETASC_SERVER, outside a bound folder, the commands after
    # login go to the server signed in to (not the default port 8000).
    cli.env_extra["RETASC_SERVER"] = ""
    me = cli.json("whoami")
    assert (me["server"], me["user"]["email"]) == (cli.server, tworld.owner.email)

    # The device code was used up; logout revokes the token on the server.
    assert cli("logout").exit_code == 0
    assert cli.server not in json.loads(creds.read_text())["servers"]
    assert "last" not in json.loads(creds.read_text())
    after = cli("whoami")
    assert after.exit_code == 3 and "not signed in" in after.stderr
    from apps.devices.models import PersonalToken

    assert PersonalToken.objects.get(prefix=stored["tokenPrefix"]).revoked_at is not None


def test_bind_writes_secret_free_config_and_the_mcp_client_claims(tworld, cli):
    cli.sign_in_as(tworld.owner)
    subprocess.run(["git", "init", "-q"], cwd=cli.folder, check=True)
    issue = new_issue(tworld.a, "Wire the CLI", body="Make `retasc bind` work.")

    result = cli("bind", "--org", tworld.org.slug, "--project", "ACME", "--yes")
    assert result.exit_code == 0, result.output + result.stderr
    assert f"Bound {cli.folder}" in result.stdout
    for runtime in ("Codex", "OpenCode", "Cursor", "Cline", "Gemini CLI"):
        assert runtime in result.stdout

    key = (cli.folder / ".retasc" / "key").read_text().strip()
    assert key.startswith("rtsc_") and key not in result.stdout  # the secret is never printed
    assert stat.S_IMODE((cli.folder / ".retasc" / "key").stat().st_mode) == 0o600
    mcp_json = json.loads((cli.folder / ".mcp.json").read_text())
    assert mcp_json == {
        "mcpServers": {
            "retasc": {"type": "http", "url": f"{cli.server}/mcp", "headers": {"Authorization": "Bearer ${RETASC_KEY}"}}
        }
    }
    assert "rtsc_" not in (cli.folder / ".mcp.json").read_text()
    assert ".retasc/" in (cli.folder / ".gitignore").read_text().splitlines()
    ignored = subprocess.run(
        ["git", "check-ignore", ".retasc/key", ".retasc/config.json"], cwd=cli.folder, capture_output=True, text=True
    )
    assert ignored.returncode == 0 and ignored.stdout.split() == [".retasc/key", ".retasc/config.json"]
    tracked = subprocess.run(["git", "check-ignore", ".mcp.json"], cwd=cli.folder)
    assert tracked.returncode == 1  # .mcp.json is meant to be committed
    minted = AgentKey.objects.get(prefix=json.loads((cli.folder / ".retasc" / "config.json").read_text())["keyPrefix"])
    assert (minted.user_id, minted.project_id, minted.runtime) == (tworld.owner.pk, tworld.project.pk, "claude-code")

    # What Claude Code would do: expand ${RETASC_KEY} from the environment, then connect.
    entry = mcp_json["mcpServers"]["retasc"]
    header = entry["headers"]["Authorization"].replace("${RETASC_KEY}", key)

    async def agent():
        async with mcp_client(entry["url"], header.removeprefix("Bearer ")) as client:
            who = await call(client, "whoami")
            claim = await call(client, "next_issue")
            return who, claim

    who, claim = asyncio.run(agent())
    assert who["principal"]["email"] == tworld.owner.email and who["key"]["prefix"] == minted.prefix
    assert claim["issue"]["identifier"] == issue.identifier and claim["claimToken"]

    # A second bind is refused; --force binds again and retires the folder's old key.
    again = cli("bind", "--org", tworld.org.slug, "--project", "ACME", "--yes")
    assert again.exit_code == 5 and "already bound" in again.stderr
    assert (cli.folder / ".retasc" / "key").read_text().strip() == key
    forced = cli("bind", "--org", tworld.org.slug, "--project", "ACME", "--yes", "--force")
    assert forced.exit_code == 0, forced.stderr
    minted.refresh_from_db()
    assert minted.revoked_at is not None
    assert (cli.folder / ".retasc" / "key").read_text().strip() != key
    assert (cli.folder / ".gitignore").read_text().count(".retasc/") == 1


def test_bind_creates_org_and_project_only_when_asked(transactional_db, cli):
    from apps.orgs.services import user_get_or_create

    newcomer, _ = user_get_or_create(email="solo@new.test", password="pw-solo-1")
    cli.sign_in_as(newcomer)
    refused = cli("bind", "--org", "Solo Works", "--project", "SOLO", "--yes")
    assert refused.exit_code == 1 and "pass --create" in refused.stderr
    assert not (cli.folder / ".retasc").exists()
    made = cli.json("bind", "--org", "Solo Works", "--project", "SOLO", "--create")
    assert (made["org"], made["project"]) == ("solo-works", "SOLO")
    assert "agentKey" not in json.dumps(made) and "rtsc_" not in json.dumps(made["configs"])


def test_join_with_an_invite_binds_in_one_command(tworld, cli_factory):
    owner_cli, newcomer_cli = cli_factory(), cli_factory()
    owner_cli.sign_in_as(tworld.owner)
    invite = owner_cli.json("members", "invite", "--expires-days", "3")
    assert invite["code"].startswith("rtscinv_") and invite["joinCommand"] == f"retasc join {invite['code']}"

    from apps.orgs.services import user_get_or_create

    newcomer, _ = user_get_or_create(email="newcomer@acme.test", password="pw-new-1")
    newcomer_cli.sign_in_as(newcomer)
    joined = newcomer_cli.json("join", invite["code"])
    assert joined["joined"]["org"]["slug"] == tworld.org.slug and joined["joined"]["role"] == "member"
    assert (joined["bind"]["org"], joined["bind"]["project"]) == (tworld.org.slug, "ACME")
    assert (newcomer_cli.folder / ".mcp.json").exists() and (newcomer_cli.folder / ".retasc" / "key").exists()

    members = owner_cli.json("members", "list")
    assert "newcomer@acme.test" in [m["email"] for m in members["members"]]
    assert [i["status"] for i in members["invites"] if i["id"] == invite["id"]] == ["accepted"]
    used = cli_factory()
    used.sign_in_as(user_get_or_create(email="late@acme.test", password="pw-late-1")[0])
    again = used("join", invite["code"], "--yes")
    assert again.exit_code == 1 and "(NOT_FOUND)" in again.stderr
    # A member cannot invite.
    member = newcomer_cli("members", "invite")
    assert member.exit_code == 1 and "(FORBIDDEN)" in member.stderr


def test_doctor_passes_then_reports_a_revoked_key(tworld, cli):
    cli.sign_in_as(tworld.owner)
    assert cli("bind", "--org", tworld.org.slug, "--project", "ACME", "--yes").exit_code == 0
    healthy = cli.json("doctor")
    assert healthy["ok"] is True, healthy
    assert [c["check"] for c in healthy["checks"]] == ["server", "version", "token", "binding", "key", "mcp"]
    assert all(c["ok"] for c in healthy["checks"])

    prefix = json.loads((cli.folder / ".retasc" / "config.json").read_text())["keyPrefix"]
    assert cli("key", "revoke", prefix, "--yes").exit_code == 0
    report = cli("doctor")
    assert report.exit_code == 1
    key_line = next(line for line in report.stdout.splitlines() if " key " in line)
    assert key_line.startswith("FAIL") and "(UNAUTHORIZED)" in key_line and "retasc bind --force" in key_line
    assert "mcp" not in report.stdout  # no handshake with a dead key


def test_next_issue_list_and_show(tworld, cli):
    cli.sign_in_as(tworld.owner)
    assert cli("bind", "--org", tworld.org.slug, "--project", "ACME", "--yes").exit_code == 0
    first = new_issue(tworld.a, "First task", priority=1, acceptance=["It works"])
    new_issue(tworld.a, "Second task")

    listed = cli.json("issue", "list")
    assert {i["identifier"] for i in listed["issues"]} == {first.identifier, f"ACME-{first.number + 1}"}
    shown = cli("issue", "show", first.identifier)
    assert shown.exit_code == 0 and "First task" in shown.stdout and "[1] It works" in shown.stdout
    missing = cli("issue", "show", "ACME-999")
    assert missing.exit_code == 1 and missing.stderr.strip().endswith("(NOT_FOUND).")

    claimed = cli("next")
    assert claimed.exit_code == 0 and f"Claimed {first.identifier}: First task" in claimed.stdout
    assert "branch acme-" in claimed.stdout.lower()
    second = cli.json("next")
    assert second["issue"]["title"] == "Second task"
    empty = cli.json("next")
    assert empty["issue"] is None


def test_keys_and_projects(tworld, cli_factory):
    owner, member = cli_factory(), cli_factory()
    owner.sign_in_as(tworld.owner)
    member.sign_in_as(tworld.member)
    made = owner.json("project", "create", "WEB", "--name", "Website")
    assert (made["prefix"], made["name"]) == ("WEB", "Website")
    assert member("project", "create", "OPS").exit_code == 1

    minted = owner.json("key", "mint", "--project", "WEB", "--runtime", "ci", "--label", "nightly")
    assert minted["agentKey"].startswith(minted["key"]["prefix"] + "_")
    rotated = owner.json("key", "rotate", minted["key"]["prefix"])
    assert rotated["agentKey"] != minted["agentKey"] and rotated["replaced"] == minted["key"]["id"]
    listed = owner.json("key", "list")
    prefixes = {k["prefix"] for k in listed["keys"]}
    assert rotated["key"]["prefix"] in prefixes and minted["key"]["prefix"] not in prefixes
    # A member sees only their own keys and cannot rotate the owner's.
    assert {k["owner"] for k in member.json("key", "list")["keys"]} == {tworld.member.email}
    denied = member("key", "rotate", rotated["key"]["prefix"])
    assert denied.exit_code == 1 and "(NOT_FOUND)" in denied.stderr


def test_members_see_members_but_never_invites(tworld, cli_factory):
    owner, member = cli_factory(), cli_factory()
    owner.sign_in_as(tworld.owner)
    member.sign_in_as(tworld.member)
    owner.json("members", "invite", "--expires-days", "3")

    listed = member.json("members", "list")

    assert {m["email"] for m in listed["members"]} == {tworld.owner.email, tworld.member.email}
    assert listed["invites"] == []
    assert len(owner.json("members", "list")["invites"]) == 1


def test_a_stopped_server_is_one_clear_sentence(transactional_db, cli_factory):
    port = free_port()
    down = cli_factory(server=f"http://127.0.0.1:{port}")
    for args in (("login", "--no-browser"), ("bind", "--yes"), ("doctor",), ("export",)):
        down.sign_in_as  # noqa: B018  (no token needed to fail on the network)
        result = down(*args)
        assert result.exit_code != 0, args
    result = down("login", "--no-browser")
    assert result.exit_code == 4
    assert result.stderr.strip() == f"Error: Cannot reach the Retasc server at http://127.0.0.1:{port}: connection refused."
    assert "Traceback" not in result.output + result.stderr
    proc = down.popen("login", "--no-browser")
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 4 and stderr.strip().splitlines() == [
        f"Error: Cannot reach the Retasc server at http://127.0.0.1:{port}: connection refused."
    ]


def test_not_signed_in_and_not_bound(transactional_db, cli):
    result = cli("bind", "--yes")
    assert result.exit_code == 3 and result.stderr.strip() == "Error: You are not signed in to this server; run retasc login."
    result = cli("next")
    assert result.exit_code == 5 and "not bound" in result.stderr
    assert cli("--help").exit_code == 0
    for sub in ("login", "logout", "whoami", "doctor", "bind", "join", "members", "key", "project", "issue", "export", "next"):
        assert cli(sub, "--help").exit_code == 0, sub
