"""`retasc`: sign in, bind a folder to an org + project, and drive the queue from a shell.

Exit codes: 0 success; 1 the server refused (its code is printed) or a check failed;
2 bad arguments; 3 not signed in, or the token / key is no longer valid; 4 the server
cannot be reached; 5 local state is in the way (already bound, not bound, bad file).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from retasc import __version__
from retasc.cli import agents, config
from retasc.cli.client import Api
from retasc.cli.errors import AUTH, LOCAL, REFUSED, UNREACHABLE, CliError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

app = typer.Typer(
    name="retasc",
    help=__doc__,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
members_app = typer.Typer(help="Invite people, list members and invites, revoke an invite or a member.", no_args_is_help=True)
key_app = typer.Typer(help="Agent keys: mint, list, rotate, revoke.", no_args_is_help=True)
project_app = typer.Typer(help="Projects of the org.", no_args_is_help=True)
issue_app = typer.Typer(help="Read issues.", no_args_is_help=True)
app.add_typer(members_app, name="members")
app.add_typer(key_app, name="key")
app.add_typer(project_app, name="project")
app.add_typer(issue_app, name="issue")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (for scripts).")]


@dataclass
class State:
    server: str
    org: str | None
    binding: config.Binding | None

    def api(self, *, org: str | None = None) -> Api:
        cred = config.credential_for(self.server) or {}
        key = None
        if self.binding is not None and self.binding.server == self.server and self.binding.key_path.exists():
            key = self.binding.key()
        default_org = org or self.org or (self.binding.org if self.binding and self.binding.server == self.server else None)
        return Api(self.server, token=cred.get("token"), key=key, org=default_org)


def state(ctx: typer.Context) -> State:
    return ctx.find_root().obj


def handled(fn):
    """Every command: a CliError becomes one sentence on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CliError as exc:
            err.print(f"Error: {escape(exc.message)}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("Interrupted.")
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:  # never a stack trace for a person; RETASC_DEBUG=1 shows it
            if os.environ.get("RETASC_DEBUG"):
                raise
            err.print(
                f"Error: unexpected {type(exc).__name__}: {escape(str(exc) or 'no detail')} (set RETASC_DEBUG=1 for details)."
            )
            raise typer.Exit(REFUSED) from None

    return wrapper


def emit_json(data) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def version_callback(value: bool):
    if value:
        typer.echo(f"retasc {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="RETASC_SERVER",
            help="Retasc server URL [default: the folder's binding, else http://127.0.0.1:8000].",
        ),
    ] = None,
    org: Annotated[
        str | None,
        typer.Option(
            "--org", envvar="RETASC_ORG", help="Org slug for org commands [default: the folder's org, else your first]."
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
):
    binding = config.find_binding()
    chosen = (server or (binding.server if binding and binding.server else None) or config.DEFAULT_SERVER).rstrip("/")
    if not chosen.startswith(("http://", "https://")):
        err.print(f"Error: --server must be an http:// or https:// URL, not {escape(chosen)!r}.")
        raise typer.Exit(2)
    ctx.obj = State(server=chosen, org=org, binding=binding)


# --- sign-in -----------------------------------------------------------------------------------


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


@app.command()
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


@app.command()
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


@app.command()
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


# --- bind ----------------------------------------------------------------------------------------


def _choose(items: list[dict], label, what: str) -> dict:
    for n, item in enumerate(items, 1):
        out.print(f"  {n}. {escape(label(item))}")
    n = typer.prompt(f"Which {what}? (number)", type=int)
    if not 1 <= n <= len(items):
        raise CliError(f"There is no {what} number {n}.", exit_code=REFUSED)
    return items[n - 1]


def _pick_org(api: Api, *, wanted: str | None, create: bool, yes: bool) -> dict:
    orgs = api.get("/api/v1/cli/orgs")["orgs"]
    ask = interactive() and not yes
    if wanted:
        match = next((o for o in orgs if wanted.lower() in (o["slug"].lower(), o["name"].lower())), None)
        if match:
            return match
        if not (create or ask and typer.confirm(f"You are not in an org named {wanted!r}. Create it?", default=False)):
            raise CliError(
                f"You are not a member of an org named {wanted!r}; pass --create to create it.",
                exit_code=REFUSED,
                code="NOT_FOUND",
            )
        if not create and not yes and not ask:
            raise CliError("Creating an org needs --create.", exit_code=REFUSED)
        return api.post("/api/v1/cli/orgs", {"name": wanted})
    if len(orgs) == 1:
        return orgs[0]
    if not orgs:
        if create or ask and typer.confirm("You are not in any org yet. Create one?", default=True):
            name = Path.cwd().name if not ask else typer.prompt("Org name", default=Path.cwd().name)
            return api.post("/api/v1/cli/orgs", {"name": name})
        raise CliError(
            "You are not a member of any org; pass --org NAME --create, or join one with retasc join CODE.", exit_code=REFUSED
        )
    if ask:
        return _choose(orgs, lambda o: f"{o['slug']} ({o['name']}, {o['role']})", "org")
    raise CliError("You belong to several orgs; pass --org SLUG.", exit_code=REFUSED)


def _default_prefix(folder: Path) -> str:
    letters = "".join(ch for ch in folder.name.upper() if ch.isalnum())
    prefix = letters if letters[:1].isalpha() else "P" + letters
    return prefix[:4] if len(prefix) >= 2 else "WORK"


def _pick_project(api: Api, org: dict, *, wanted: str | None, create: bool, yes: bool, name: str | None) -> dict:
    projects = org.get("projects") or []
    ask = interactive() and not yes

    def make(prefix: str) -> dict:
        return api.post("/api/v1/cli/projects", {"prefix": prefix, "name": name or prefix}, org=org["slug"])

    if wanted:
        match = next((p for p in projects if p["prefix"].lower() == wanted.lower()), None)
        if match:
            return match
        if create or ask and typer.confirm(f"{org['slug']} has no project {wanted.upper()}. Create it?", default=False):
            return make(wanted)
        raise CliError(
            f"The org {org['slug']} has no project {wanted.upper()}; pass --create to create it.",
            exit_code=REFUSED,
            code="NOT_FOUND",
        )
    if len(projects) == 1:
        return projects[0]
    if not projects:
        if create or ask and typer.confirm(f"{org['slug']} has no project yet. Create one?", default=True):
            default = _default_prefix(Path.cwd())
            return make(typer.prompt("Project prefix (2-10 letters/digits)", default=default) if ask else default)
        raise CliError(f"The org {org['slug']} has no project; pass --project PREFIX --create.", exit_code=REFUSED)
    if ask:
        return _choose(projects, lambda p: f"{p['prefix']} ({p['name']})", "project")
    raise CliError(f"The org {org['slug']} has several projects; pass --project PREFIX.", exit_code=REFUSED)


def bind_folder(
    st: State,
    *,
    org: str | None,
    project: str | None,
    create: bool,
    yes: bool,
    force: bool,
    runtime: str,
    label: str | None,
    project_name: str | None = None,
) -> dict:
    folder = Path.cwd().resolve()
    existing = config.find_binding(folder)
    if existing is not None and existing.folder == folder and not force:
        raise CliError(
            f"This folder is already bound to {existing.org}/{existing.project} (key {existing.key_prefix}); "
            "pass --force to bind it again.",
            exit_code=LOCAL,
        )
    with st.api() as api:
        if not api.token:
            raise CliError("You are not signed in to this server; run retasc login.", exit_code=AUTH)
        chosen_org = _pick_org(api, wanted=org, create=create, yes=yes)
        chosen_project = _pick_project(api, chosen_org, wanted=project, create=create, yes=yes, name=project_name)
        minted = api.post(
            "/api/v1/cli/keys",
            {
                "project": chosen_project["prefix"],
                "runtime": runtime,
                "label": label or f"{folder.name} on {socket.gethostname()}"[:120],
            },
            org=chosen_org["slug"],
        )
        binding = config.Binding(
            folder=folder,
            server=st.server,
            org=chosen_org["slug"],
            project=chosen_project["prefix"],
            runtime=runtime,
            key_prefix=minted["key"]["prefix"],
            key_id=minted["key"]["id"],
        )
        config.write_binding(binding, minted["agentKey"])
        mcp_url = f"{st.server}/mcp"
        agents.write_claude_mcp_json(folder, mcp_url)
        replaced = None
        if existing is not None and existing.folder == folder and existing.server == st.server and existing.key_prefix:
            try:  # the old folder key stops working: one live key per bound folder
                api.post(f"/api/v1/cli/keys/{existing.key_prefix}/revoke", org=existing.org)
                replaced = existing.key_prefix
            except CliError:
                replaced = None
    return {
        "server": st.server,
        "org": binding.org,
        "project": binding.project,
        "runtime": runtime,
        "keyPrefix": binding.key_prefix,
        "keyId": binding.key_id,
        "mcpUrl": mcp_url,
        "folder": str(folder),
        "files": [".mcp.json", ".retasc/config.json", ".retasc/key", ".gitignore"],
        "revokedKey": replaced,
        "env": agents.env_line(folder),
        "configs": agents.blocks(mcp_url),
    }


def print_bind(result: dict) -> None:
    out.print(
        f"Bound {escape(result['folder'])} to [bold]{escape(result['org'])}/{escape(result['project'])}[/bold] "
        f"with a new {escape(result['runtime'])} key {escape(result['keyPrefix'])}."
    )
    if result.get("revokedKey"):
        out.print(f"The folder's previous key {escape(result['revokedKey'])} was revoked.")
    out.print(
        "Wrote .mcp.json (Claude Code; no secret), .retasc/key (the key, mode 600) and .retasc/config.json; .retasc/ is git-ignored."
    )
    out.print("Agents read the key from the RETASC_KEY environment variable; set it before starting one:")
    out.print(f"  {escape(result['env'])}")
    out.print("Other runtimes (secret-free; paste into the file named):")
    for block in result["configs"]:
        out.print(f"\n[bold]{escape(block['name'])}[/bold] — {escape(block['file'])}")
        out.print(escape(block["text"]))


@app.command()
@handled
def bind(
    ctx: typer.Context,
    org: Annotated[str | None, typer.Option("--org", help="Org slug or name (default: your only org, or ask).")] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Project prefix (default: the org's only project, or ask).")
    ] = None,
    create: Annotated[bool, typer.Option("--create", help="Create the org / project if missing, without asking.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Never ask; fail instead of prompting.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Bind again a folder that is already bound (its old key is revoked).")
    ] = False,
    runtime: Annotated[str, typer.Option("--runtime", help="The agent runtime the key is for.")] = "claude-code",
    label: Annotated[str | None, typer.Option("--label", help="The key's label (default: folder and host).")] = None,
    as_json: JsonOpt = False,
):
    """Bind this folder: pick or create org + project, mint an agent key, wire Claude Code (.mcp.json), print configs for other runtimes."""
    st = state(ctx)
    result = bind_folder(
        st, org=org or st.org, project=project, create=create, yes=yes or as_json, force=force, runtime=runtime, label=label
    )
    emit_json(result) if as_json else print_bind(result)


@app.command()
@handled
def join(
    ctx: typer.Context,
    code: Annotated[str, typer.Argument(help="The invite code (rtscinv_…).")],
    project: Annotated[
        str | None, typer.Option("--project", help="Project prefix to bind (default: the org's only one, or ask).")
    ] = None,
    runtime: Annotated[str, typer.Option("--runtime", help="The agent runtime the key is for.")] = "claude-code",
    force: Annotated[bool, typer.Option("--force", help="Bind again a folder that is already bound.")] = False,
    no_bind: Annotated[bool, typer.Option("--no-bind", help="Only join the org; do not bind this folder.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Never ask.")] = False,
    as_json: JsonOpt = False,
):
    """Join an org with an invite code and bind this folder to it, in one command (signs you in first if needed)."""
    st = state(ctx)
    existing = config.find_binding()
    if not no_bind and existing is not None and existing.folder == Path.cwd().resolve() and not force:
        raise CliError(
            f"This folder is already bound to {existing.org}/{existing.project}; pass --force or --no-bind.", exit_code=LOCAL
        )
    if not config.credential_for(st.server):
        device_login(st)
    with st.api() as api:
        joined = api.post("/api/v1/cli/invites/redeem", {"code": code.strip()}, org=None)
    if not as_json:
        out.print(f"Joined [bold]{escape(joined['org']['name'])}[/bold] ({escape(joined['org']['slug'])}) as {joined['role']}.")
    result = {"joined": joined, "bind": None}
    if not no_bind:
        result["bind"] = bind_folder(
            st,
            org=joined["org"]["slug"],
            project=project,
            create=False,
            yes=yes or as_json,
            force=force,
            runtime=runtime,
            label=None,
        )
        if not as_json:
            print_bind(result["bind"])
    if as_json:
        emit_json(result)


# --- doctor --------------------------------------------------------------------------------------


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
    from retasc.cli import mcpcheck

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


@app.command()
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


# --- members, keys, projects -------------------------------------------------------------------


@members_app.command("invite")
@handled
def members_invite(
    ctx: typer.Context,
    expires_days: Annotated[int, typer.Option("--expires-days", min=1, max=30, help="Days the code stays valid (1-30).")] = 7,
    role: Annotated[str, typer.Option("--role", help="member or owner.")] = "member",
    as_json: JsonOpt = False,
):
    """Create a single-use invite code (owners only)."""
    with state(ctx).api() as api:
        invite = api.post("/api/v1/cli/invites", {"expiresDays": expires_days, "role": role})
    if as_json:
        emit_json(invite)
        return
    out.print(f"Invite for {escape(invite['org'])} ({invite['role']}), valid until {invite['expiresAt']}, shown once:")
    out.print(f"  [bold]{escape(invite['code'])}[/bold]")
    out.print(f"They run: {escape(invite['joinCommand'])}")
    out.print(f"or open: {escape(invite['url'])}")


@members_app.command("list")
@handled
def members_list(ctx: typer.Context, as_json: JsonOpt = False):
    """Members of the org, and its invites."""
    with state(ctx).api() as api:
        members = api.get("/api/v1/members")["members"]
        try:
            invites = api.get("/api/v1/cli/invites")["invites"]
        except CliError as exc:
            if exc.code != "FORBIDDEN":
                raise
            invites = []  # only owners see invites
    if as_json:
        emit_json({"members": members, "invites": invites})
        return
    table = Table("member", "email", "role", "status", "live keys", box=None)
    for m in members:
        table.add_row(str(m["memberId"]), m["email"], m["role"], m["status"], str(m["liveKeys"]))
    out.print(table)
    if invites:
        table = Table("invite", "code", "role", "status", "expires", "accepted by", box=None)
        for i in invites:
            table.add_row(str(i["id"]), f"{i['prefix']}…", i["role"], i["status"], i["expiresAt"] or "", i["acceptedBy"] or "")
        out.print(table)


@members_app.command("revoke")
@handled
def members_revoke(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(help="An invite (its id or code) or a member (their e-mail) to retire.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
):
    """Revoke a pending invite, or retire a member (their access ends and their keys are retired)."""
    with state(ctx).api() as api:
        if "@" in target:
            if (
                not yes
                and interactive()
                and not typer.confirm(f"Retire {target}? Their access ends and their agent keys stop working.")
            ):
                raise typer.Abort()
            answer = api.post(f"/api/v1/members/{target}/retire")
            message = f"Retired {target}; {answer.get('keysRetired', 0)} key(s) retired."
        else:
            answer = api.post(f"/api/v1/cli/invites/{target}/revoke")
            message = f"Invite {answer['id']} revoked."
    emit_json(answer) if as_json else out.print(escape(message))


@key_app.command("mint")
@handled
def key_mint(
    ctx: typer.Context,
    project: Annotated[
        str | None, typer.Option("--project", help="Project prefix (default: the folder's, else the org's first).")
    ] = None,
    runtime: Annotated[
        str, typer.Option("--runtime", help="claude-code, codex, cursor, opencode, cline, gemini, ci or free text.")
    ] = "ci",
    label: Annotated[str, typer.Option("--label", help="A label to tell keys apart.")] = "",
    as_json: JsonOpt = False,
):
    """Mint an agent key (the secret is shown once)."""
    st = state(ctx)
    project = project or (st.binding.project if st.binding else None)
    with st.api() as api:
        minted = api.post("/api/v1/cli/keys", {"project": project, "runtime": runtime, "label": label})
    if as_json:
        emit_json(minted)
        return
    k = minted["key"]
    out.print(
        f"Minted {escape(k['prefix'])} ({escape(k['runtime'])}, {escape(k['project'])}, id {k['id']}); the key is shown once:"
    )
    out.print(f"  [bold]{escape(minted['agentKey'])}[/bold]")


def _keys_table(keys: list[dict]) -> Table:
    table = Table("id", "prefix", "runtime", "label", "project", "owner", "last used", "status", box=None)
    for k in keys:
        table.add_row(
            str(k["id"]), k["prefix"], k["runtime"], k["label"], k["project"], k["owner"], k["lastUsedAt"] or "never", k["status"]
        )
    return table


@key_app.command("list")
@handled
def key_list(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
    as_json: JsonOpt = False,
):
    """Agent keys you can manage (owners: the org's; members: their own)."""
    with state(ctx).api() as api:
        keys = api.get("/api/v1/cli/keys", params={"all": "1"} if all_ else None)["keys"]
    emit_json({"keys": keys}) if as_json else out.print(_keys_table(keys))


@key_app.command("rotate")
@handled
def key_rotate(
    ctx: typer.Context, key: Annotated[str, typer.Argument(help="Key id or prefix (rtsc_…).")], as_json: JsonOpt = False
):
    """Replace a key with a new secret (the old one stops working). This folder's key is rewritten in place."""
    st = state(ctx)
    with st.api() as api:
        answer = api.post(f"/api/v1/cli/keys/{key}/rotate")
    b = st.binding
    mine = b is not None and b.server == st.server and (key in (b.key_prefix, str(b.key_id)))
    if mine:
        config.update_key(b, answer["agentKey"], answer["key"]["prefix"], answer["key"]["id"])
    if as_json:
        emit_json(
            {
                "key": answer["key"],
                "replaced": answer["replaced"],
                "folderUpdated": mine,
                **({} if mine else {"agentKey": answer["agentKey"]}),
            }
        )
        return
    out.print(f"Rotated to {escape(answer['key']['prefix'])} (id {answer['key']['id']}); the old key no longer works.")
    if mine:
        out.print("This folder's .retasc/key now holds the new key; restart your agents so they read it.")
    else:
        out.print(f"The new key is shown once:\n  [bold]{escape(answer['agentKey'])}[/bold]")


@key_app.command("revoke")
@handled
def key_revoke(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Key id or prefix (rtsc_…).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
):
    """Revoke a key (and its session keys); its live claims end at once."""
    if not yes and interactive() and not typer.confirm(f"Revoke {key}? Agents using it stop working."):
        raise typer.Abort()
    with state(ctx).api() as api:
        answer = api.post(f"/api/v1/cli/keys/{key}/revoke")
    emit_json(answer) if as_json else out.print(f"Revoked {escape(answer['prefix'])}.")


@project_app.command("create")
@handled
def project_create(
    ctx: typer.Context,
    prefix: Annotated[str, typer.Argument(help="2-10 letters or digits, starting with a letter (issue ids read PREFIX-n).")],
    name: Annotated[str, typer.Option("--name", help="A display name.")] = "",
    as_json: JsonOpt = False,
):
    """Create a project in the org (owners only)."""
    with state(ctx).api() as api:
        project = api.post("/api/v1/cli/projects", {"prefix": prefix, "name": name or prefix})
    emit_json(project) if as_json else out.print(f"Created project {escape(project['prefix'])} ({escape(project['name'])}).")


# --- the queue -------------------------------------------------------------------------------------


def _issue_line(i: dict) -> str:
    prio = {0: "-", 1: "urgent", 2: "high", 3: "medium", 4: "low"}.get(i.get("priority"), "?")
    return f"{i['identifier']:<10} {i['status']:<9} {prio:<7} {i['title']}"


@app.command("next")
@handled
def next_(
    ctx: typer.Context,
    all_lanes: Annotated[bool, typer.Option("--all-lanes", help="Also take teammates' assigned work.")] = False,
    as_json: JsonOpt = False,
):
    """Claim the next ready issue with this folder's agent key and print it."""
    st = state(ctx)
    if st.binding is None:
        raise CliError("This folder is not bound to Retasc; run retasc bind.", exit_code=LOCAL)
    with st.api() as api:
        answer = api.post("/api/v1/work/next", {"allLanes": all_lanes} if all_lanes else {}, auth="key")
    if as_json:
        emit_json(answer)
        return
    issue = answer.get("issue")
    if issue is None:
        out.print(
            f"Nothing ready in your lane (ready {answer.get('ready', 0)}, other lanes {answer.get('otherLanes', 0)}, "
            f"blocked {answer.get('blocked', 0)}, claimed {answer.get('claimed', 0)}, awaiting triage {answer.get('awaitingTriage', 0)})."
        )
        return
    out.print(f"Claimed [bold]{escape(issue['identifier'])}[/bold]: {escape(issue['title'])}")
    out.print(f"  branch {escape(answer['branch'])}   lease until {answer['claimExpiresAt']}")
    out.print(f"  claim token {escape(answer['claimToken'])}")
    if answer.get("resumed"):
        out.print(
            f"  resuming from a checkpoint by {escape(str(answer.get('checkpointBy')))}:\n{escape(str(answer.get('checkpoint')))}"
        )
    if issue.get("body"):
        out.print("\n" + escape(issue["body"]))
    for n, criterion in enumerate(issue.get("acceptance") or [], 1):
        out.print(f"  [{n}] {escape(criterion)}")


def _reader(st: State) -> tuple[Api, str]:
    api = st.api()
    return api, ("key" if api.key else "token")


@issue_app.command("list")
@handled
def issue_list(
    ctx: typer.Context,
    status: Annotated[
        list[str] | None, typer.Option("--status", help="todo, doing, blocked, review, done, canceled (repeatable).")
    ] = None,
    assignee: Annotated[str | None, typer.Option("--assignee", help="An e-mail, me or none.")] = None,
    label: Annotated[str | None, typer.Option("--label")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200)] = 50,
    as_json: JsonOpt = False,
):
    """List issues, newest first (with this folder's key, else as you)."""
    api, auth = _reader(state(ctx))
    params = [("limit", str(limit))] + [("status", s) for s in status or []]
    params += [("assignee", assignee)] if assignee else []
    params += [("label", label)] if label else []
    with api:
        answer = api.get("/api/v1/issues", params=params, auth=auth)
    if as_json:
        emit_json(answer)
        return
    for i in answer["issues"]:
        out.print(escape(_issue_line(i)))
    if not answer["issues"]:
        out.print("No issues.")


@issue_app.command("show")
@handled
def issue_show(ctx: typer.Context, identifier: Annotated[str, typer.Argument(help="PREFIX-n")], as_json: JsonOpt = False):
    """Show one issue."""
    api, auth = _reader(state(ctx))
    with api:
        issue = api.get(f"/api/v1/issues/{identifier}", auth=auth)
    if as_json:
        emit_json(issue)
        return
    out.print(f"[bold]{escape(issue['identifier'])}[/bold] {escape(issue['title'])}")
    out.print(
        f"status {issue['status']}  priority {issue['priority']} (effective {issue['effectivePriority']})  "
        f"assignee {issue['assignee'] or '-'}  author {issue['author'] or '-'}"
    )
    if issue.get("labels"):
        out.print("labels " + escape(", ".join(issue["labels"])))
    if issue.get("blockedBy"):
        out.print("blocked by " + escape(", ".join(issue["blockedBy"])))
    if issue.get("claim"):
        out.print(f"held by {escape(str(issue['claim']['heldBy']))} until {issue['claim']['expiresAt']}")
    if issue.get("body"):
        out.print("\n" + escape(issue["body"]))
    for n, criterion in enumerate(issue.get("acceptance") or [], 1):
        out.print(f"  [{n}] {escape(criterion)}")
    if issue.get("checkpoint"):
        out.print("\ncheckpoint: " + escape(issue["checkpoint"]))


# --- export ---------------------------------------------------------------------------------------


@app.command()
@handled
def export(
    ctx: typer.Context,
    fmt: Annotated[str, typer.Option("--format", help="json (everything) or csv (issues).")] = "json",
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="File to write (- for stdout) [default: the server's file name].")
    ] = None,
):
    """Export the whole org, decrypted (owners only)."""
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TransferSpeedColumn

    if fmt not in ("json", "csv"):
        raise CliError("--format is json or csv.", exit_code=2)
    st = state(ctx)
    with st.api() as api, api.stream("/api/v1/export", params={"format": fmt}) as response:
        disposition = response.headers.get("Content-Disposition", "")
        default_name = disposition.split('filename="')[-1].rstrip('"') if 'filename="' in disposition else f"retasc-export.{fmt}"
        to_stdout = output == "-"
        path = None if to_stdout else Path(output or default_name)
        sink = sys.stdout.buffer if to_stdout else open(path.with_name(path.name + ".part"), "wb")  # noqa: SIM115
        size = 0
        try:
            progress = Progress(
                SpinnerColumn(),
                TextColumn("Exporting"),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeElapsedColumn(),
                console=err,
                transient=True,
                disable=to_stdout or not err.is_terminal,
            )
            with progress:
                task = progress.add_task("export", total=None)
                for chunk in response.iter_bytes():
                    sink.write(chunk)
                    size += len(chunk)
                    progress.update(task, completed=size)
        except BaseException:
            if not to_stdout:
                sink.close()
                path.with_name(path.name + ".part").unlink(missing_ok=True)
            raise
        if not to_stdout:
            sink.close()
            os.replace(path.with_name(path.name + ".part"), path)
    if to_stdout:
        sys.stdout.flush()
    else:
        err.print(f"Exported {size} bytes to {escape(str(path))}.")


def main() -> None:
    app(prog_name="retasc")


if __name__ == "__main__":
    main()
