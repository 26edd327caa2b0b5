"""What every command shares: the consoles, the per-invocation ``State``, the ``--json``
option, and ``handled`` (a ``CliError`` becomes one sentence on stderr and its exit code)."""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from retasc.cli import config
from retasc.cli.client import Api
from retasc.cli.errors import REFUSED, USAGE, CliError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (for scripts).")]


@dataclass
class State:
    server: str
    org: str | None
    binding: config.Binding | None

    def api(self, *, org: str | None = None, timeout: float = 30.0) -> Api:
        cred = config.credential_for(self.server) or {}
        key = self.env_key()
        if key is None and self.binding is not None and self.binding.server == self.server and self.binding.key_path.exists():
            key = self.binding.key()
        default_org = org or self.org or (self.binding.org if self.binding and self.binding.server == self.server else None)
        return Api(self.server, token=cred.get("token"), key=key, org=default_org, timeout=timeout)

    @staticmethod
    def env_key() -> str | None:
        """``RETASC_KEY``, when set, overrides the folder's key (as the README says)."""
        return (os.environ.get("RETASC_KEY") or "").strip() or None

    @property
    def has_key(self) -> bool:
        return self.env_key() is not None or (self.binding is not None and self.binding.key_path.exists())


PRIORITIES = {0: "none", 1: "urgent", 2: "high", 3: "medium", 4: "low"}


def priority_word(value) -> str:
    return PRIORITIES.get(value, "?") if isinstance(value, int) else str(value or "?")


def priority_number(text: str) -> int:
    """A priority given as a word (urgent, high, medium, low, none) or its number 0-4."""
    words = {word: number for number, word in PRIORITIES.items()}
    value = str(text).strip().lower()
    if value in words:
        return words[value]
    if value.isdigit() and int(value) in PRIORITIES:
        return int(value)
    raise CliError(f"{text!r} is not a priority; use urgent, high, medium, low or none.", exit_code=USAGE)


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
