"""``retasc export``: stream the whole org, decrypted, to a file or stdout."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TransferSpeedColumn

from retasc.cli.errors import CliError
from retasc.cli.output import err, handled, state


@handled
def export(
    ctx: typer.Context,
    fmt: Annotated[str, typer.Option("--format", help="json (everything) or csv (issues).")] = "json",
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="File to write (- for stdout) [default: the server's file name].")
    ] = None,
):
    """Export the whole org, decrypted (owners only)."""
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
