"""``retasc members``: invite people, list members and invites, revoke an invite or a member."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from retasc.cli.errors import CliError
from retasc.cli.output import JsonOpt, emit_json, handled, interactive, out, state

members_app = typer.Typer(help="Invite people, list members and invites, revoke an invite or a member.", no_args_is_help=True)


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
