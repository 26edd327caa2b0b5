"""Runtime usage: the read-only exporters on fixture logs written here in the runtimes'
formats (Claude Code's project JSONL, Codex's session rollouts), `retasc usage push`
against a live server, and what the server stores and the Dash shows."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import pytest
from django.test import Client

from apps.billing.models import RuntimeUsage
from apps.billing.usage import usage_report
from apps.core.errors import ServiceError
from apps.orgs.services import actor_for_human
from retasc.cli import usage as exporters

SECRET_PROMPT = "please refactor the payroll module named zebra-7731"
SECRET_ANSWER = "here is the refactored code for zebra-7731"
TODAY = date.today()
YESTERDAY = TODAY - timedelta(days=1)


def _ts(day: date, hour: int = 10) -> str:
    return f"{day.isoformat()}T{hour:02d}:00:00.000Z"


def claude_line(*, msg_id, session, day, cwd, model="claude-sonnet-4-5", tokens=(100, 20, 1000), text=SECRET_ANSWER) -> str:
    tin, tout, cache = tokens
    return json.dumps(
        {
            "parentUuid": None,
            "isSidechain": False,
            "type": "assistant",
            "sessionId": session,
            "cwd": cwd,
            "timestamp": _ts(day),
            "requestId": f"req_{msg_id}",
            "uuid": f"u-{msg_id}-{tin}",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "usage": {
                    "input_tokens": tin,
                    "cache_creation_input_tokens": 5,
                    "cache_read_input_tokens": cache,
                    "output_tokens": tout,
                },
            },
        }
    )


def write_claude_logs(home: Path, repo: Path, elsewhere: Path) -> None:
    project = home / "projects" / str(repo).replace("/", "-")
    project.mkdir(parents=True)
    user = json.dumps(
        {
            "type": "user",
            "sessionId": "s1",
            "cwd": str(repo),
            "timestamp": _ts(YESTERDAY),
            "message": {"role": "user", "content": SECRET_PROMPT},
        }
    )
    lines = [
        user,
        claude_line(msg_id="msg_1", session="s1", day=YESTERDAY, cwd=str(repo)),
        # the same message again (a second content block): counted once
        claude_line(msg_id="msg_1", session="s1", day=YESTERDAY, cwd=str(repo), text="second block"),
        claude_line(msg_id="msg_2", session="s1", day=YESTERDAY, cwd=str(repo), tokens=(50, 10, 0)),
        "{this is not json",
        json.dumps({"type": "assistant", "sessionId": "s1", "message": {"id": "msg_bad", "usage": {"input_tokens": "many"}}}),
        claude_line(msg_id="msg_3", session="s2", day=TODAY, cwd=str(repo / "sub"), model="claude-opus-4-1", tokens=(7, 3, 0)),
        "",
    ]
    (project / "s1.jsonl").write_text("\n".join(lines) + "\n")
    other = home / "projects" / "other"
    other.mkdir()
    (other / "s9.jsonl").write_text(claude_line(msg_id="msg_9", session="s9", day=TODAY, cwd=str(elsewhere)) + "\n")


def write_codex_logs(home: Path, repo: Path) -> None:
    folder = home / "sessions" / f"{TODAY:%Y}" / f"{TODAY:%m}" / f"{TODAY:%d}"
    folder.mkdir(parents=True)

    def token_count(total, last_in, cached, out):
        return {
            "timestamp": _ts(TODAY, 11),
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "total_token_usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "total_tokens": total},
                    "last_token_usage": {
                        "input_tokens": last_in,
                        "cached_input_tokens": cached,
                        "output_tokens": out,
                        "reasoning_output_tokens": 0,
                        "total_tokens": last_in + out,
                    },
                },
            },
        }

    lines = [
        {
            "timestamp": _ts(TODAY, 11),
            "type": "session_meta",
            "payload": {"id": "cx-1", "cwd": str(repo), "originator": "codex_cli_rs"},
        },
        {"timestamp": _ts(TODAY, 11), "type": "turn_context", "payload": {"cwd": str(repo), "model": "gpt-5-codex"}},
        {
            "timestamp": _ts(TODAY, 11),
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SECRET_PROMPT}]},
        },
        token_count(1300, 1000, 400, 300),
        token_count(1300, 1000, 400, 300),  # repeated (a resumed session replays it): counted once
        {"timestamp": _ts(TODAY, 11), "type": "event_msg", "payload": {"type": "token_count", "info": None}},
        token_count(2000, 600, 100, 100),
    ]
    text = (
        "\n".join(json.dumps(line) for line in lines) + '\n{"type": "event_msg", "payload": {"type": "token_count", "info": {}}\n'
    )
    (folder / "rollout-cx-1.jsonl").write_text(text)


@pytest.fixture
def logs(tmp_path, monkeypatch):
    repo, elsewhere = (tmp_path / "repo").resolve(), (tmp_path / "elsewhere").resolve()
    repo.mkdir()
    (repo / "sub").mkdir()
    elsewhere.mkdir()
    claude_home, codex_home = tmp_path / "claude", tmp_path / "codex"
    write_claude_logs(claude_home, repo, elsewhere)
    write_codex_logs(codex_home, repo)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude_home))
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    return repo


def test_claude_code_exporter(logs):
    report = exporters.collect("claude-code", folder=logs).report()
    assert report["days"] == [
        {
            "day": YESTERDAY.isoformat(),
            "model": "claude-sonnet-4-5",
            "inputTokens": 150,
            "outputTokens": 30,
            "cacheReadTokens": 1000,
            "sessions": 1,
            "messages": 2,
        },
        {
            "day": TODAY.isoformat(),
            "model": "claude-opus-4-1",
            "inputTokens": 7,
            "outputTokens": 3,
            "cacheReadTokens": 0,
            "sessions": 1,
            "messages": 1,
        },
    ]
    assert (report["skipped"], report["duplicates"], report["files"]) == (2, 1, 2)
    assert SECRET_PROMPT not in json.dumps(report) and "zebra" not in json.dumps(report)
    # another folder's session counts only with --all-folders
    everything = exporters.collect("claude-code", folder=None).report()
    assert sum(d["messages"] for d in everything["days"]) == 4


def test_codex_exporter(logs):
    report = exporters.collect("codex", folder=logs).report()
    assert report["days"] == [
        {
            "day": TODAY.isoformat(),
            "model": "gpt-5-codex",
            "inputTokens": 1100,
            "outputTokens": 400,
            "cacheReadTokens": 500,
            "sessions": 1,
            "messages": 2,
        }
    ]
    assert (report["skipped"], report["duplicates"]) == (1, 1)
    assert "zebra" not in json.dumps(report)


def test_no_logs_is_an_empty_report(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "none"))
    assert exporters.collect("claude-code", folder=None).report() == {
        "runtime": "claude-code",
        "days": [],
        "files": 0,
        "skipped": 0,
        "duplicates": 0,
    }


# --- the server side ---------------------------------------------------------------------


def test_report_replaces_the_day_and_is_per_key(world):
    day = {"day": TODAY.isoformat(), "model": "m", "inputTokens": 10, "outputTokens": 2, "sessions": 1, "messages": 1}
    assert usage_report(actor=world.a, runtime="codex", days=[day]) == {"runtime": "codex", "stored": 1}
    assert usage_report(actor=world.a, runtime="codex", days=[{**day, "inputTokens": 12}]) == {"runtime": "codex", "stored": 1}
    usage_report(actor=world.b, runtime="codex", days=[day])
    rows = sorted(RuntimeUsage.objects.values_list("key_id", "runtime", "input_tokens", "principal_id"))
    assert rows == sorted([(world.a.key_id, "codex", 12, world.owner.pk), (world.b.key_id, "codex", 10, world.member.pk)])


@pytest.mark.parametrize(
    "runtime, days",
    [
        ("codex", [{"day": "yesterday"}]),
        ("codex", [{"day": TODAY.isoformat(), "inputTokens": -1}]),
        ("codex", [{"day": TODAY.isoformat(), "prompt": SECRET_PROMPT}]),  # no text fields at all
        ("codex", [{"day": TODAY.isoformat()}, {"day": "1999-01-01"}]),  # one bad entry: nothing stored
        ("", [{"day": TODAY.isoformat()}]),
        ("codex", "not a list"),
    ],
)
def test_bad_reports_are_refused_and_nothing_is_stored(world, unchanged, runtime, days):
    with unchanged(), pytest.raises(ServiceError) as caught:
        usage_report(actor=world.a, runtime=runtime, days=days)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert RuntimeUsage.objects.count() == 0


def test_only_an_agent_key_reports(world):
    with pytest.raises(ServiceError) as caught:
        usage_report(actor=actor_for_human(user=world.owner, org=world.org), runtime="codex", days=[])
    assert caught.value.code == "FORBIDDEN"


# --- `retasc usage push` against a live server, then the Dash -----------------------------


@pytest.mark.slow
def test_usage_push_then_fleet_and_member_pages(cli, tworld, logs, monkeypatch):
    cli.env_extra = {"RETASC_KEY": tworld.owner_agent.raw}
    shown = cli.json("usage", "show", folder=logs)
    assert [r["runtime"] for r in shown["reports"]] == ["claude-code", "codex"]
    first = cli.json("usage", "push", folder=logs)
    assert [(r["runtime"], r["stored"], r["skipped"]) for r in first["pushed"]] == [("claude-code", 2, 2), ("codex", 1, 1)]
    cli.json("usage", "push", folder=logs)  # twice: the same rows, not doubled
    rows = sorted(
        RuntimeUsage.objects.values_list("runtime", "model", "input_tokens", "output_tokens", "cache_read_tokens", "sessions")
    )
    assert rows == [
        ("claude-code", "claude-opus-4-1", 7, 3, 0, 1),
        ("claude-code", "claude-sonnet-4-5", 150, 30, 1000, 1),
        ("codex", "gpt-5-codex", 1100, 400, 500, 1),
    ]
    assert set(RuntimeUsage.objects.values_list("key_id", flat=True)) == {tworld.a.key_id}

    owner = Client()
    owner.force_login(tworld.owner)
    fleet = owner.get("/fleet/").content.decode()
    assert 'id="fleet-usage"' in fleet
    assert '<tr data-runtime="codex"><td><span class="badge">codex</span></td>' in fleet
    assert '<td class="num">1100</td><td class="num">400</td><td class="num">500</td>' in fleet
    members = owner.get("/org/members/").content.decode()
    assert "190 tokens · 1000 cached · 2 sessions" in members  # claude-code: 150+30 + 7+3
    assert "1500 tokens · 500 cached · 1 sessions" in members


def test_usage_push_needs_a_key(cli, logs, monkeypatch):
    monkeypatch.delenv("RETASC_KEY", raising=False)
    result = cli("usage", "push", folder=logs)
    assert result.exit_code == 5
    assert "No agent key: run retasc bind in this folder, or set RETASC_KEY." in result.stderr
