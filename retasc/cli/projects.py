"""``retasc project``: the org's projects."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli.output import JsonOpt, emit_json, handled, out, state

project_app = typer.Typer(help="Projects of the org.", no_args_is_help=True)


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
