"""``retasc doctor``: the server, the version, the sign-in, the folder's key and binding,
and the MCP handshake, each a check with a fix."""

from __future__ import annotations

import json
import os

import typer
from rich.markup import escape

from retasc import __version__
from retasc.cli import agents, config
from retasc.cli.errors import REFUSED, UNREACHABLE, CliError
from retasc.cli.output import JsonOpt, State, emit_json, handled, out, state


def _check(results: list, name: str, ok: bool | None, detail: str, fix: str = "") -> bool:
    results.append({"check": name, "ok": ok, "detail": detail, "fix": fix if ok is False else ""})
    return bool(ok)


def _doctor_binding(results: list, st: State) -> str | None:
    """Local checks of the folder's binding; returns the key when there is one to try."""
    b = st.binding
    if b is None:
        _check(results, "binding", None, "this folder is not bound (skipped key and MCP checks)", "run retasc bind")
        return None
    problems = []
    if b.server != st.server:
        problems.append(f"bound to {b.server}, not {st.server}")
    key = None
    if not b.key_path.exists():
        problems.append(".retasc/key is missing")
    else:
        key = b.key()
        if not key.startswith(b.key_prefix or "rtsc_"):
            problems.append(f".retasc/key does not match the recorded key {b.key_prefix}")
        if os.name == "posix" and b.key_path.stat().st_mode & 0o077:
            problems.append(".retasc/key is readable by others (chmod 600 .retasc/key)")
    mcp_json = b.folder / ".mcp.json"
    try:
        entry = json.loads(mcp_json.read_text())["mcpServers"][agents.SERVER_NAME]
        if entry.get("url") != f"{b.server}/mcp":
            problems.append(f".mcp.json points at {entry.get('url')}")
        if "rtsc_" in mcp_json.read_text():
            problems.append(".mcp.json contains a secret key")
    except (OSError, ValueError, KeyError, TypeError):
        problems.append(".mcp.json has no retasc server")
    ignore = b.folder / ".gitignore"
    if not ignore.exists() or ".retasc" not in ignore.read_text():
        problems.append(".retasc/ is not in .gitignore")
    _check(
        results,
        "binding",
        not problems,
        f"{b.folder} -> {b.org}/{b.project} ({b.key_prefix})" if not problems else "; ".join(problems),
        "run retasc bind --force in this folder",
    )
    return key


def run_doctor(st: State) -> list[dict]:
    from retasc.cli import mcpcheck  # defers a heavy import (asyncio now; the MCP SDK when the check runs)

    results: list[dict] = []
    api = st.api()
    with api:
        try:
            health = api.get("/api/health", auth=None)
            reachable = _check(results, "server", True, f"{st.server} answers")
        except CliError as exc:
            reachable = _check(
                results, "server", False, exc.message, "start the server, or pass --server URL / set RETASC_SERVER"
            )
        if reachable:
            version = health.get("version")
            _check(
                results,
                "version",
                version == __version__,
                f"server {version}, CLI {__version__}",
                "upgrade the CLI or the server so the versions match",
            )
        cred = config.credential_for(st.server)
        if not cred:
            _check(results, "token", False, "not signed in to this server", "run retasc login")
        elif reachable:
            try:
                me = api.get("/api/v1/cli/me")
                _check(results, "token", True, f"signed in as {me['email']} ({cred.get('tokenPrefix')})")
            except CliError as exc:
                _check(results, "token", False, exc.message, "run retasc login")
        key = _doctor_binding(results, st)
        if key and reachable:
            api.key = key
            try:
                who = api.get("/api/v1/whoami", auth="key")
                key_ok = _check(
                    results,
                    "key",
                    True,
                    f"{who['key']['prefix']} acts as {who['principal']['email']} in "
                    f"{who['org']['slug']}/{(who.get('project') or {}).get('prefix')}",
                )
            except CliError as exc:
                key_ok = _check(results, "key", False, exc.message, "run retasc bind --force to mint a new key for this folder")
            if key_ok:
                try:
                    answer = mcpcheck.mcp_whoami(f"{st.server}/mcp", key)
                    _check(
                        results,
                        "mcp",
                        True,
                        f"handshake ok, {answer['tools']} tools, whoami as {answer['whoami']['principal']['email']}",
                    )
                except BaseException as exc:  # noqa: BLE001 - anything the SDK raises is a failed check
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    _check(
                        results, "mcp", False, mcpcheck.failure_reason(exc), "check that /mcp is served (daphne) and reachable"
                    )
    return results


@handled
def doctor(ctx: typer.Context, as_json: JsonOpt = False):
    """Check the server, the version, your sign-in, this folder's key, the MCP handshake and the folder binding."""
    st = state(ctx)
    results = run_doctor(st)
    failed = any(r["ok"] is False for r in results)
    if as_json:
        emit_json({"ok": not failed, "checks": results})
    else:
        for r in results:
            mark = {True: "[green]ok[/green]  ", False: "[red]FAIL[/red]", None: "[yellow]skip[/yellow]"}[r["ok"]]
            line = f"{mark} {r['check']:<8} {escape(r['detail'])}"
            if r["ok"] is False and r["fix"]:
                line += f" — {escape(r['fix'])}"
            out.print(line)
    if failed:
        server_down = any(r["check"] == "server" and r["ok"] is False for r in results)
        raise typer.Exit(UNREACHABLE if server_down else REFUSED)
