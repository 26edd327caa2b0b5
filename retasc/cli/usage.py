"""`retasc usage show | push`: runtime usage read from local session logs, counts only.

Read-only exporters for two runtimes' JSONL session logs:

- Claude Code: ``$CLAUDE_CONFIG_DIR`` or ``~/.claude``, ``projects/**/*.jsonl``. An
  assistant line carries ``sessionId``, ``timestamp``, ``cwd`` and ``message`` with ``id``,
  ``model`` and ``usage`` (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``).
  One message is often written as several lines (one per content block) with the same
  message id and usage: counted once.
- Codex: ``$CODEX_HOME`` or ``~/.codex``, ``sessions/**/*.jsonl``. ``session_meta`` names the
  session and its ``cwd``, ``turn_context`` the model, and each ``event_msg`` of type
  ``token_count`` carries ``info.last_token_usage`` (``input_tokens``,
  ``cached_input_tokens``, ``output_tokens``) and the running ``total_token_usage``, whose
  total identifies the event (a resumed or copied log repeats it: counted once).

Only numbers, model names, session ids and days are kept: a line's text fields are never
copied out, and lines without usage are skipped before they are parsed. A line that is
not JSON (or has the wrong shape) is skipped and counted. Sessions are those run in this
folder (or below it) unless ``--all-folders``; totals are per runtime, day (UTC) and model.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli.client import Api
from retasc.cli.errors import LOCAL, CliError
from retasc.cli.output import JsonOpt, emit_json, handled, out, state

usage_app = typer.Typer(help="Runtime usage (tokens, sessions) from local session logs.", no_args_is_help=True)

RUNTIMES = ("claude-code", "codex")


@dataclass
class Totals:
    """Per (day, model): tokens and the sessions and messages counted."""

    runtime: str
    days: dict = field(
        default_factory=lambda: defaultdict(lambda: {"in": 0, "out": 0, "cache": 0, "sessions": set(), "messages": 0})
    )
    seen: set = field(default_factory=set)
    files: int = 0
    skipped: int = 0
    duplicates: int = 0

    def add(self, *, message_id: str, session: str, timestamp: str, model: str, tokens_in: int, tokens_out: int, cache: int):
        if message_id in self.seen:
            self.duplicates += 1
            return
        self.seen.add(message_id)
        day = _day(timestamp)
        row = self.days[(day, model or "")]
        row["in"] += tokens_in
        row["out"] += tokens_out
        row["cache"] += cache
        row["messages"] += 1
        row["sessions"].add(session)

    def report(self) -> dict:
        days = [
            {
                "day": day,
                "model": model,
                "inputTokens": row["in"],
                "outputTokens": row["out"],
                "cacheReadTokens": row["cache"],
                "sessions": len(row["sessions"]),
                "messages": row["messages"],
            }
            for (day, model), row in sorted(self.days.items())
        ]
        return {
            "runtime": self.runtime,
            "days": days,
            "files": self.files,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
        }


def _day(timestamp: str) -> str:
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).date().isoformat()


def _count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


def _inside(cwd, folder: Path | None) -> bool:
    if folder is None:
        return True
    if not isinstance(cwd, str) or not cwd:
        return False
    try:
        return Path(cwd).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def _broken(line: str) -> bool:
    """A line that cannot be one JSON object (checked without parsing it). Blank lines are not."""
    text = line.strip()
    return bool(text) and not (text.startswith("{") and text.endswith("}"))


def _lines(path: Path):
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            yield from handle
    except OSError:
        return


def claude_code(home: Path, *, folder: Path | None) -> Totals:
    totals = Totals("claude-code")
    for path in sorted((home / "projects").rglob("*.jsonl")):
        totals.files += 1
        for line in _lines(path):
            if _broken(line):
                totals.skipped += 1
                continue
            if '"usage"' not in line:
                continue  # no usage here: not parsed at all
            try:
                entry = json.loads(line)
                message = entry["message"]
                usage = message["usage"]
                counted = {
                    "message_id": str(message["id"]),
                    "session": str(entry["sessionId"]),
                    "timestamp": entry["timestamp"],
                    "model": str(message.get("model") or ""),
                    "tokens_in": _count(usage.get("input_tokens", 0)),
                    "tokens_out": _count(usage.get("output_tokens", 0)),
                    "cache": _count(usage.get("cache_read_input_tokens", 0)),
                }
                _day(counted["timestamp"])
                if _inside(entry.get("cwd"), folder):
                    totals.add(**counted)
            except (ValueError, KeyError, TypeError, AttributeError):
                totals.skipped += 1
    return totals


def codex(home: Path, *, folder: Path | None) -> Totals:
    totals = Totals("codex")
    for path in sorted((home / "sessions").rglob("*.jsonl")):
        totals.files += 1
        session, model, inside = path.stem, "", folder is None
        for line in _lines(path):
            if _broken(line):
                totals.skipped += 1
                continue
            if '"session_meta"' not in line and '"turn_context"' not in line and '"token_count"' not in line:
                continue  # messages, tool calls: not parsed at all
            try:
                entry = json.loads(line)
                kind, payload = entry["type"], entry["payload"]
                if kind == "session_meta":
                    session = str(payload.get("id") or session)
                    inside = _inside(payload.get("cwd"), folder)
                elif kind == "turn_context":
                    model = str(payload.get("model") or model)
                    if payload.get("cwd") is not None:
                        inside = _inside(payload.get("cwd"), folder)
                elif kind == "event_msg" and payload.get("type") == "token_count":
                    info = payload.get("info")
                    if info is None:
                        continue  # a rate-limit-only event
                    last, total = info["last_token_usage"], info["total_token_usage"]
                    if not inside:
                        continue
                    cached = _count(last.get("cached_input_tokens", 0))
                    totals.add(
                        message_id=f"{session}:{_count(total['total_tokens'])}",
                        session=session,
                        timestamp=entry["timestamp"],
                        model=model,
                        # Codex counts cached input inside input_tokens; report it apart.
                        tokens_in=max(_count(last.get("input_tokens", 0)) - cached, 0),
                        tokens_out=_count(last.get("output_tokens", 0)),
                        cache=cached,
                    )
            except (ValueError, KeyError, TypeError, AttributeError):
                totals.skipped += 1
    return totals


def collect(runtime: str, *, folder: Path | None) -> Totals:
    if runtime == "claude-code":
        return claude_code(Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude"), folder=folder)
    return codex(Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex"), folder=folder)


RuntimeOpt = Annotated[
    str, typer.Option("--runtime", help="claude-code, codex, or all.", case_sensitive=False, show_default=True)
]
AllFoldersOpt = Annotated[bool, typer.Option("--all-folders", help="Count sessions run in any folder, not just this one.")]


def _runtimes(value: str) -> tuple[str, ...]:
    value = value.strip().lower()
    if value == "all":
        return RUNTIMES
    if value not in RUNTIMES:
        raise CliError(f"--runtime is claude-code, codex or all, not {value!r}.", exit_code=2)
    return (value,)


def _folder(st, all_folders: bool) -> Path | None:
    if all_folders:
        return None
    return (st.binding.folder if st.binding else Path.cwd()).resolve()


def _print(report: dict) -> None:
    tokens = sum(d["inputTokens"] + d["outputTokens"] for d in report["days"])
    out.print(
        f"{report['runtime']}: {len(report['days'])} day/model rows, {tokens} tokens in+out, "
        f"{report['files']} files, {report['skipped']} malformed lines skipped, {report['duplicates']} duplicates"
    )


@usage_app.command("show")
@handled
def show(ctx: typer.Context, runtime: RuntimeOpt = "all", all_folders: AllFoldersOpt = False, json_: JsonOpt = False):
    """What `retasc usage push` would send (read locally; nothing leaves this machine)."""
    folder = _folder(state(ctx), all_folders)
    reports = [collect(r, folder=folder).report() for r in _runtimes(runtime)]
    if json_:
        emit_json({"reports": reports})
        return
    for report in reports:
        _print(report)


@usage_app.command("push")
@handled
def push(ctx: typer.Context, runtime: RuntimeOpt = "all", all_folders: AllFoldersOpt = False, json_: JsonOpt = False):
    """Send per-day usage totals to the server, tied to this folder's agent key (or RETASC_KEY)."""
    st = state(ctx)
    key = os.environ.get("RETASC_KEY", "").strip()
    if not key:
        if st.binding is None or st.binding.server != st.server:
            raise CliError("No agent key: run retasc bind in this folder, or set RETASC_KEY.", exit_code=LOCAL)
        key = st.binding.key()
    folder = _folder(st, all_folders)
    results = []
    with Api(st.server, key=key) as api:
        for name in _runtimes(runtime):
            report = collect(name, folder=folder).report()
            answer = api.post("/api/v1/usage/reports", {"runtime": name, "days": report["days"]}, auth="key")
            results.append({**answer, "skipped": report["skipped"], "duplicates": report["duplicates"]})
    if json_:
        emit_json({"pushed": results})
        return
    for r in results:
        out.print(f"{escape(r['runtime'])}: sent {r['stored']} day/model rows ({r['skipped']} malformed lines skipped).")
