"""Sign-in: ``retasc login`` (the device flow), ``logout`` and ``whoami``."""

from __future__ import annotations

import os
import socket
import time
import webbrowser
from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli import config
from retasc.cli.client import Api
from retasc.cli.errors import AUTH, CliError
from retasc.cli.output import JsonOpt, State, emit_json, err, handled, interactive, out, state


def device_login(st: State, *, open_browser: bool = True) -> dict:
    """The device flow: print the code, open the browser, poll until a human decides."""
    with Api(st.server) as api:
        start = api.post("/api/v1/cli/device/start", {"clientName": f"retasc CLI on {socket.gethostname()}"[:120]}, auth=None)
        err.print(
            f"To sign in, open [bold]{escape(start['verificationUri'])}[/bold] and enter the code [bold]{start['userCode']}[/bold]"
        )
        err.print(f"(or open {escape(start['verificationUriComplete'])})")
        if open_browser and interactive() and os.environ.get("RETASC_NO_BROWSER") is None:
            try:
                webbrowser.open(start["verificationUriComplete"])
            except Exception:  # no browser here: the printed URL is enough
                pass
        interval = max(1, int(start.get("interval") or 5))
        deadline = time.monotonic() + int(start.get("expiresIn") or 600)
        with err.status("Waiting for approval in the browser…", spinner="dots"):
            while True:
                if time.monotonic() > deadline:
                    raise CliError(
                        "The sign-in code expired before it was approved; run retasc login again (EXPIRED_TOKEN).",
                        exit_code=AUTH,
                        code="EXPIRED_TOKEN",
                    )
                time.sleep(interval)
                answer = api.request(
                    "POST",
                    "/api/v1/cli/device/poll",
                    json={"deviceCode": start["deviceCode"]},
                    auth=None,
                    ok=(403, 410, 428, 429),
                )
                code = answer.get("code") if "_status" in answer else None
                if code is None:
                    break
                if code == "AUTHORIZATION_PENDING":
                    continue
                if code in ("SLOW_DOWN", "RATE_LIMITED"):
                    interval = int(answer.get("interval") or answer.get("retryAfterSeconds") or interval + 5)
                    continue
                if code == "ACCESS_DENIED":
                    raise CliError("The sign-in was denied in the browser (ACCESS_DENIED).", exit_code=AUTH, code=code)
                raise CliError(f"{answer.get('message', 'The sign-in failed').rstrip('.')} ({code}).", exit_code=AUTH, code=code)
    credential = {
        "token": answer["token"],
        "tokenPrefix": answer["tokenPrefix"],
        "email": answer["email"],
        "savedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    config.save_credential(st.server, credential)
    return credential


@handled
def login(
    ctx: typer.Context,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Only print the URL and code.")] = False,
    as_json: JsonOpt = False,
):
    """Sign in to the server through your browser (device flow); the token is stored in your config directory."""
    st = state(ctx)
    cred = device_login(st, open_browser=not no_browser)
    if as_json:
        emit_json({"server": st.server, "email": cred["email"], "tokenPrefix": cred["tokenPrefix"]})
    else:
        out.print(f"Signed in to {escape(st.server)} as [bold]{escape(cred['email'])}[/bold].")


@handled
def logout(ctx: typer.Context):
    """Revoke this machine's token on the server and forget it."""
    st = state(ctx)
    cred = config.credential_for(st.server)
    if not cred:
        out.print(f"Not signed in to {escape(st.server)}.")
        return
    try:
        with st.api() as api:
            api.post("/api/v1/cli/logout", ok=(401,))
    except CliError as exc:
        config.save_credential(st.server, None)
        raise CliError(
            f"Signed out locally, but the token could not be revoked on the server: {exc.message}", exit_code=exc.exit_code
        ) from None
    config.save_credential(st.server, None)
    out.print(f"Signed out of {escape(st.server)}.")


@handled
def whoami(ctx: typer.Context, as_json: JsonOpt = False):
    """Who you are on the server, your orgs, and what this folder is bound to."""
    st = state(ctx)
    with st.api() as api:
        if not api.token and not api.key:
            raise CliError("You are not signed in to this server; run retasc login.", exit_code=AUTH)
        me = api.get("/api/v1/cli/me") if api.token else None
        folder = None
        if st.binding is not None and api.key:
            folder = {**st.binding.as_dict(), "path": str(st.binding.folder), "agent": api.get("/api/v1/whoami", auth="key")}
    if as_json:
        emit_json({"server": st.server, "user": me, "folder": folder})
        return
    if me:
        out.print(
            f"Signed in to {escape(st.server)} as [bold]{escape(me['email'])}[/bold] (token {me['token']['prefix'] if me.get('token') else 'session'})."
        )
        for o in me["orgs"]:
            projects = ", ".join(p["prefix"] for p in o["projects"]) or "no projects"
            out.print(f"  {escape(o['slug'])}  {escape(o['name'])}  ({o['role']}; {escape(projects)})")
        if not me["orgs"]:
            out.print("  You are not a member of any org yet: retasc bind --create, or retasc join CODE.")
    else:
        out.print(f"Not signed in to {escape(st.server)} (run retasc login).")
    if folder:
        agent = folder["agent"]
        out.print(
            f"This folder ({escape(folder['path'])}) is bound to {escape(agent['org']['slug'])}/{escape((agent.get('project') or {}).get('prefix', '?'))}"
            f" with key {escape(agent['key']['prefix'])} ({escape(agent['runtime'])})."
        )
