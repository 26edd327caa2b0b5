"""``retasc import``: bring a backlog in (owners). ``linear`` reads Linear teams with an
API key taken from ``LINEAR_API_KEY`` or a hidden prompt (never an argument); ``file``
uploads a Retasc export (JSON) or a beads ``issues.jsonl``. The server runs the import as
a background job; the command follows it with a progress bar until it ends. Ctrl-C stops
following, not the import.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from retasc.cli.errors import LOCAL, REFUSED, USAGE, CliError
from retasc.cli.output import JsonOpt, emit_json, err, handled, out, state

import_app = typer.Typer(help="Import a backlog: Linear teams, a Retasc export or beads JSONL (owners).", no_args_is_help=True)

FINISHED = ("done", "failed")
POLL_SECONDS = 0.5
SHOWN_ERRORS = 10
COUNTED = ("projects", "issues", "comments", "labels", "relations", "attachments", "people")


def detect_source(path: Path, head: bytes) -> str:
    """``retasc`` for a Retasc export (one JSON object with format retasc-export), ``beads``
    for JSON Lines (one object per line, as beads writes issues.jsonl)."""
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first:
        try:
            record = json.loads(first)
        except ValueError:
            record = None
        if isinstance(record, dict):
            return "retasc" if record.get("format") == "retasc-export" else "beads"
        if first == "{" or first.startswith('{"format"') or '"retasc-export"' in text[:4096]:
            return "retasc"
    raise CliError(
        f"{path} is neither a Retasc export (JSON) nor a beads issues.jsonl; name it with --source retasc or --source beads.",
        exit_code=USAGE,
    )


def linear_key() -> str:
    """The Linear API key: ``LINEAR_API_KEY``, else asked without echo on a terminal."""
    key = (os.environ.get("LINEAR_API_KEY") or "").strip()
    if key:
        return key
    if not sys.stdin.isatty():
        raise CliError("Set LINEAR_API_KEY (the key is never a command-line argument), or run in a terminal to be asked.")
    key = getpass.getpass("Linear API key (not shown): ").strip()
    if not key:
        raise CliError("No Linear API key given.", exit_code=USAGE)
    return key


def counts_line(job: dict) -> str:
    counts = job.get("counts") or {}
    parts = [f"{counts[name]} {name}" for name in COUNTED if counts.get(name)]
    changes = [f"{counts[name]} {name}" for name in ("created", "updated", "unchanged", "skipped") if counts.get(name)]
    if counts.get("errors"):
        changes.append(f"{counts['errors']} errors")
    return ", ".join(parts + changes) or "nothing yet"


def follow(api, import_id: str, *, show_progress: bool) -> dict:
    """Poll the job until it is done or failed, drawing a bar on stderr when it is a
    terminal."""
    progress = Progress(
        SpinnerColumn(),
        TextColumn("Importing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[counts]}"),
        console=err,
        transient=True,
        disable=not show_progress,
    )
    with progress:
        task = progress.add_task("import", total=None, counts="queued")
        while True:
            job = api.get(f"/api/v1/imports/{import_id}")
            progress.update(
                task, total=job.get("total"), completed=job.get("done") or 0, counts=f"{job['status']}: {counts_line(job)}"
            )
            if job["status"] in FINISHED:
                return job
            time.sleep(POLL_SECONDS)


def stopped_following(import_id: str) -> typer.Exit:
    err.print(
        f"Stopped following; import {import_id} keeps running on the server. Follow it with: retasc import status {import_id}"
    )
    return typer.Exit(130)


def report(job: dict, *, as_json: bool) -> None:
    if as_json:
        emit_json(job)
    else:
        word = "Imported" if job["status"] == "done" else "Import failed"
        out.print(f"{word} ({job['source']}, {job['importId']}): {escape(counts_line(job))}.")
        if job.get("summary"):
            out.print(escape(job["summary"]))
        errors = job.get("errors") or []
        for e in errors[:SHOWN_ERRORS]:
            out.print(f"  {escape(str(e.get('record') or '?'))}: {escape(str(e.get('message') or ''))}")
        more = max((job.get("counts") or {}).get("errors", len(errors)), len(errors)) - min(len(errors), SHOWN_ERRORS)
        if more > 0:
            out.print(f"  … and {more} more (see --json or the Dash's import page).")
        if job["status"] == "failed":
            out.print("Run the same import again (the same file, or the same teams) to resume where it stopped.")
    if job["status"] == "failed":
        raise typer.Exit(REFUSED)


def started(api, answer: dict, *, wait: bool, as_json: bool) -> None:
    import_id = answer["importId"]
    if not wait:
        if as_json:
            emit_json(answer)
        else:
            out.print(f"Import {import_id} is {answer['status']}. Follow it with: retasc import status {import_id}")
        return
    try:
        if not as_json:
            err.print(f"Import {import_id} started; Ctrl-C stops following (the import keeps running).")
        job = follow(api, import_id, show_progress=err.is_terminal)
    except KeyboardInterrupt:
        raise stopped_following(import_id) from None
    report(job, as_json=as_json)


WaitOpt = Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the import until it ends.")]


@import_app.command("linear")
@handled
def import_linear(
    ctx: typer.Context,
    team: Annotated[
        list[str] | None, typer.Option("--team", help="A Linear team key, e.g. ENG (repeat; default: every team the key sees).")
    ] = None,
    wait: WaitOpt = True,
    as_json: JsonOpt = False,
):
    """Import Linear teams (owners). The key comes from LINEAR_API_KEY or a hidden prompt;
    it is used for this run and never stored."""
    teams = [t.strip().upper() for t in team or [] if t.strip()]
    key = linear_key()
    body = {"source": "linear", "apiKey": key}
    if teams:
        body["teams"] = teams
    with state(ctx).api(timeout=120.0) as api:
        answer = api.post("/api/v1/imports", body)
        started(api, answer, wait=wait, as_json=as_json)


@import_app.command("file")
@handled
def import_file(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A Retasc export (.json) or a beads issues.jsonl.")],
    source: Annotated[str | None, typer.Option("--source", help="retasc or beads [default: detected from the file].")] = None,
    wait: WaitOpt = True,
    as_json: JsonOpt = False,
):
    """Import a Retasc export or a beads issues.jsonl (owners)."""
    if source is not None and source not in ("retasc", "beads"):
        raise CliError("--source is retasc or beads.", exit_code=USAGE)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"Cannot read {path} ({exc.strerror or exc}).", exit_code=LOCAL) from None
    if not data.strip():
        raise CliError(f"{path} is empty.", exit_code=LOCAL)
    source = source or detect_source(path, data[:65536])
    with state(ctx).api(timeout=300.0) as api:
        answer = api.upload("/api/v1/imports", data={"source": source}, file=("file", path.name, data))
        started(api, answer, wait=wait, as_json=as_json)


@import_app.command("status")
@handled
def import_status(
    ctx: typer.Context,
    import_id: Annotated[str, typer.Argument(help="The import's id (retasc import list shows them).")],
    wait: WaitOpt = True,
    as_json: JsonOpt = False,
):
    """Follow one import until it ends (or show it at once with --no-wait)."""
    with state(ctx).api() as api:
        try:
            job = follow(api, import_id, show_progress=err.is_terminal) if wait else api.get(f"/api/v1/imports/{import_id}")
        except KeyboardInterrupt:
            raise stopped_following(import_id) from None
    report(job, as_json=as_json)


@import_app.command("list")
@handled
def import_list(ctx: typer.Context, as_json: JsonOpt = False):
    """The org's imports, newest first."""
    with state(ctx).api() as api:
        jobs = api.get("/api/v1/imports")["imports"]
    if as_json:
        emit_json({"imports": jobs})
        return
    if not jobs:
        out.print("No imports yet.")
        return
    table = Table("import", "source", "status", "done", "started", "counts", box=None)
    for job in jobs:
        total = job.get("total")
        done = f"{job.get('done') or 0}/{total}" if total is not None else str(job.get("done") or 0)
        table.add_row(job["importId"], job["source"], job["status"], done, (job.get("startedAt") or "")[:19], counts_line(job))
    out.print(table)
