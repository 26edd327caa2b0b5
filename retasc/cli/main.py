"""`retasc`: sign in, bind a folder to an org + project, and drive the queue from a shell.

Exit codes: 0 success; 1 the server refused (its code is printed) or a check failed;
2 bad arguments; 3 not signed in, or the token / key is no longer valid; 4 the server
cannot be reached; 5 local state is in the way (already bound, not bound, bad file).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from retasc import __version__
from retasc.cli import (
    auth,
    billing,
    bind,
    config,
    connectors,
    doctor,
    export,
    imports,
    issue_write,
    issues,
    keys,
    members,
    projects,
    stdio,
    usage,
)
from retasc.cli.output import State, err

app = typer.Typer(
    name="retasc",
    help=__doc__,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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
            help="Retasc server URL [default: the folder's binding, else the server you signed in to last, else http://127.0.0.1:8000].",
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
    chosen = (
        server or (binding.server if binding and binding.server else None) or config.last_server() or config.DEFAULT_SERVER
    ).rstrip("/")
    if not chosen.startswith(("http://", "https://")):
        err.print(f"Error: --server must be an http:// or https:// URL, not {escape(chosen)!r}.")
        raise typer.Exit(2)
    ctx.obj = State(server=chosen, org=org, binding=binding)


# Top-level commands, in the order `retasc --help` lists them; then the command groups.
app.command()(auth.login)
app.command()(auth.logout)
app.command()(auth.whoami)
app.command()(bind.bind)
app.command()(bind.join)
app.command()(doctor.doctor)
app.command("next")(issues.next_)
app.command()(export.export)
app.command("mcp")(stdio.mcp)
app.add_typer(members.members_app, name="members")
app.add_typer(keys.key_app, name="key")
app.add_typer(projects.project_app, name="project")
# issue_write adds create, update, done, release and comment to the issue group.
issues.issue_app.add_typer(issue_write.dep_app, name="dep")
app.add_typer(issues.issue_app, name="issue")
app.add_typer(usage.usage_app, name="usage")
app.add_typer(connectors.connector_app, name="connector")
app.add_typer(billing.billing_app, name="billing")
app.add_typer(imports.import_app, name="import")


def main() -> None:
    app(prog_name="retasc")


if __name__ == "__main__":
    main()
