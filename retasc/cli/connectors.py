"""``retasc connector``: connect a GitHub/GitLab repository to a project, list, revoke."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from retasc.cli.errors import LOCAL, USAGE, CliError
from retasc.cli.output import JsonOpt, emit_json, handled, interactive, out, state

connector_app = typer.Typer(help="GitHub / GitLab connectors: add, list, revoke.", no_args_is_help=True)


@connector_app.command("add")
@handled
def connector_add(
    ctx: typer.Context,
    provider: Annotated[str, typer.Option("--provider", help="github or gitlab.")],
    repo: Annotated[str, typer.Option("--repo", help="OWNER/NAME (GitLab: the project's full path).")],
    project: Annotated[str | None, typer.Option("--project", help="Project prefix (default: the folder's project).")] = None,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="A file holding the provider token writeback uses.")
    ] = None,
    api_url: Annotated[str | None, typer.Option("--api-url", help="The provider's API base URL (self-hosted).")] = None,
    pr_sync: Annotated[bool, typer.Option("--pr-sync", help="A merged PR naming an issue marks it done.")] = False,
    as_json: JsonOpt = False,
):
    """Connect a repository (owners only). Prints the webhook URL and its secret, shown once."""
    st = state(ctx)
    project = project or (st.binding.project if st.binding else None)
    if not project:
        raise CliError("Name the project with --project (this folder is not bound).", exit_code=USAGE)
    body = {"provider": provider, "project": project, "repo": repo, "prSync": pr_sync}
    if token_file is not None:
        try:
            body["token"] = token_file.read_text().strip()
        except OSError as exc:
            raise CliError(f"Cannot read --token-file {token_file} ({exc.strerror}).", exit_code=LOCAL) from None
    if api_url:
        body["apiUrl"] = api_url
    with st.api() as api:
        created = api.post("/api/v1/connectors", body)
    if as_json:
        emit_json(created)
        return
    out.print(f"Connected {escape(repo)} to {escape(project.upper())} (connector {created['connectorId']}).")
    out.print(f"Webhook URL: {escape(created['webhookUrl'])}")
    out.print(f"Secret (shown once): [bold]{escape(created['secret'])}[/bold]")
    hint = "content type application/json; events Issues, Issue comments" if provider == "github" else "Issues, Comments"
    out.print(f"Add the webhook in the repository's settings ({hint}; Pull requests / Merge requests for PR sync).")


@connector_app.command("list")
@handled
def connector_list(ctx: typer.Context, as_json: JsonOpt = False):
    """The org's connectors: provider, repo, project, live, last delivery, counts."""
    with state(ctx).api() as api:
        connectors = api.get("/api/v1/connectors")["connectors"]
    if as_json:
        emit_json({"connectors": connectors})
        return
    table = Table("connector", "provider", "repo", "project", "live", "last delivery", "deliveries", "issues", "status", box=None)
    for c in connectors:
        status = "revoked" if c["revokedAt"] else ("error: " + c["lastError"] if c["lastError"] else "ok")
        table.add_row(
            c["connectorId"],
            c["provider"],
            c["repo"],
            c["project"],
            "yes" if c["live"] else "no",
            c["lastDeliveryAt"] or "never",
            str(c["counts"]["deliveries"]),
            str(c["counts"]["issues"]),
            status,
        )
    out.print(table if connectors else "No connectors yet; add one with retasc connector add.")


@connector_app.command("revoke")
@handled
def connector_revoke(
    ctx: typer.Context,
    connector_id: Annotated[str, typer.Argument(help="The connector's id (from retasc connector list).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
):
    """Revoke a connector (owners only): its deliveries are refused from now on."""
    if not yes and interactive() and not typer.confirm(f"Revoke connector {connector_id}? Its webhook stops working."):
        raise typer.Abort()
    with state(ctx).api() as api:
        answer = api.post(f"/api/v1/connectors/{connector_id}/revoke")
    emit_json(answer) if as_json else out.print(escape(f"Revoked connector {answer['connectorId']} ({answer['repo']})."))
