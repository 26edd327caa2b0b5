"""``retasc bind`` and ``retasc join``: pick or create an org and a project, mint the
folder's agent key, write its files, and print the configs for other runtimes."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli import agents, config
from retasc.cli.auth import device_login
from retasc.cli.client import Api
from retasc.cli.errors import AUTH, LOCAL, REFUSED, CliError
from retasc.cli.output import JsonOpt, State, emit_json, handled, interactive, out, state


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
