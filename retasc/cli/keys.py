"""``retasc key``: mint, list, rotate and revoke agent keys."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from retasc.cli import config
from retasc.cli.output import JsonOpt, emit_json, handled, interactive, out, state

key_app = typer.Typer(help="Agent keys: mint, list, rotate, revoke.", no_args_is_help=True)


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


KEY_COLUMNS = ("id", "prefix", "runtime", "label", "project", "owner", "last used", "status")


def _key_row(k: dict) -> list[str]:
    values = (k["id"], k["prefix"], k["runtime"], k["label"], k["project"], k["owner"], k["lastUsedAt"] or "never", k["status"])
    return [str(v).replace("\t", " ") for v in values]


def _keys_table(keys: list[dict]) -> Table:
    table = Table(*KEY_COLUMNS, box=None)
    for k in keys:
        table.add_row(*_key_row(k))
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
    if as_json:
        emit_json({"keys": keys})
    elif out.is_terminal:
        out.print(_keys_table(keys))
    else:
        # Piped: one tab-separated line per key, never squeezed or wrapped to a guessed width.
        typer.echo("\t".join(KEY_COLUMNS))
        for k in keys:
            typer.echo("\t".join(_key_row(k)))


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
