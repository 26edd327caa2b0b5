"""`retasc issue create|update|done|release|comment|dep` against a live Daphne: the
claim token `retasc next` received is remembered in .retasc/ (0600), RETASC_KEY
overrides the folder's key, refusals are one sentence and change nothing."""

from __future__ import annotations

import json
import stat

import pytest

from apps.issues.models import Activity, Comment, Issue, Relation
from apps.orgs.services import agent_key_mint
from tests.conftest import new_issue

pytestmark = pytest.mark.slow


def _bound(tworld, cli):
    cli.sign_in_as(tworld.owner)
    assert cli("bind", "--org", tworld.org.slug, "--project", "ACME", "--yes").exit_code == 0
    return cli


def test_create_update_comment_and_deps(tworld, cli):
    _bound(tworld, cli)
    body = cli.folder / "body.md"
    body.write_text("Steps:\n- [ ] one\n")
    made = cli.json(
        "issue",
        "create",
        "Fix the login",
        "--body-file",
        str(body),
        "--priority",
        "high",
        "--label",
        "bug",
        "--label",
        "auth",
        "--no-dependency",
        "standalone",
        "--acceptance",
        "tests pass",
        "--acceptance",
        "docs",
    )
    assert (made["title"], made["priority"], sorted(made["labels"])) == ("Fix the login", 2, ["auth", "bug"])
    assert made["body"] == "Steps:\n- [ ] one" and made["acceptance"] == ["tests pass", "docs"]
    blocker = cli.json("issue", "create", "Schema first", "--no-dependency", "root", "--priority", "low")
    text = cli("issue", "create", "Container", "--container", "--no-dependency", "groups work")
    assert text.exit_code == 0 and "Created ACME-3 (todo, none): Container" in text.stdout
    assert Issue.objects.get(org=tworld.org, number=3).work is False

    assert cli("issue", "dep", "add", made["identifier"], blocker["identifier"]).exit_code == 0
    assert Relation.objects.filter(source__number=2, target__number=1, type="blocks").exists()
    shown = cli.json("issue", "show", made["identifier"])
    assert shown["blockedBy"] == [blocker["identifier"]]
    # a cycle is refused in one sentence, nothing written
    before = Activity.objects.count()
    cycle = cli("issue", "dep", "add", blocker["identifier"], made["identifier"])
    assert cycle.exit_code == 1 and "(CYCLE)" in cycle.stderr and Activity.objects.count() == before
    assert cli("issue", "dep", "rm", made["identifier"], blocker["identifier"]).exit_code == 0
    assert not Relation.objects.filter(source__number=2, target__number=1).exists()

    updated = cli.json("issue", "update", made["identifier"], "--title", "Fix the login page", "--priority", "urgent")
    assert (updated["title"], updated["priority"]) == ("Fix the login page", 1)
    nothing = cli("issue", "update", made["identifier"])
    assert nothing.exit_code == 2 and "Nothing to change" in nothing.stderr
    bad = cli("issue", "update", made["identifier"], "--priority", "asap")
    assert bad.exit_code == 2 and "not a priority" in bad.stderr

    said = cli("issue", "comment", made["identifier"], "Looked into it")
    assert said.exit_code == 0 and Comment.objects.get(issue__number=1, issue__org=tworld.org).body == "Looked into it"
    listed = cli("issue", "list")
    assert "ACME-1" in listed.stdout and "urgent" in listed.stdout  # priority as words


def test_next_then_done_with_no_token_pasted(tworld, cli):
    _bound(tworld, cli)
    issue = new_issue(tworld.a, "Ship it", acceptance=["builds", "tests pass"])
    claimed = cli.json("next")
    token = claimed["claimToken"]
    kept = cli.folder / ".retasc" / "claims.json"
    assert json.loads(kept.read_text()) == {issue.identifier: token}
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600

    # evidence missing: refused, in one sentence, counted from 1; nothing changes
    before = Activity.objects.count()
    short = cli("issue", "done", issue.identifier, "--evidence", "make ok")
    assert short.exit_code == 1 and "(ACCEPTANCE_EVIDENCE_REQUIRED)" in short.stderr and "criterion 2" in short.stderr
    assert Activity.objects.count() == before and Issue.objects.get(pk=issue.pk).status == "doing"

    done = cli("issue", "done", issue.identifier, "--evidence", "make ok", "--evidence", "42 passed")
    assert done.exit_code == 0 and f"Done: {issue.identifier}" in done.stdout
    assert Issue.objects.get(pk=issue.pk).status == "done"
    assert json.loads(kept.read_text()) == {}
    shown = cli("issue", "show", issue.identifier)
    assert "[2] tests pass" in shown.stdout and "evidence: 42 passed" in shown.stdout


def test_release_and_a_wrong_token(tworld, cli):
    _bound(tworld, cli)
    issue = new_issue(tworld.a, "Hand back")
    cli.json("next")
    wrong = cli("issue", "update", issue.identifier, "--title", "x", "--claim-token", "rtclm_wrong")
    assert wrong.exit_code == 1 and "not the one for your claim" in wrong.stderr
    assert Issue.objects.get(pk=issue.pk).title == "Hand back"
    released = cli("issue", "release", issue.identifier, "--note", "ran out of time")
    assert released.exit_code == 0 and Issue.objects.get(pk=issue.pk).status == "todo"
    assert Issue.objects.get(pk=issue.pk).checkpoint.note == "ran out of time"
    again = cli("issue", "release", issue.identifier)
    assert again.exit_code == 5 and "No claim token" in again.stderr


def test_retasc_key_overrides_the_folders_key(tworld, cli):
    _bound(tworld, cli)
    _, member_key = agent_key_mint(org=tworld.org, user=tworld.member, project=tworld.project, runtime="codex")
    cli.env_extra = {"RETASC_KEY": member_key}
    made = cli.json("issue", "create", "Filed by the member", "--no-dependency", "x")
    assert Issue.objects.get(org=tworld.org, number=int(made["identifier"].split("-")[1])).author_id == tworld.member.pk
    # and it works in a folder that is not bound at all
    unbound = cli.folder.parent / f"{cli.folder.name}-unbound"
    unbound.mkdir()
    claimed = cli.json("next", folder=unbound)
    assert claimed["issue"]["identifier"] == made["identifier"]
    assert Issue.objects.get(org=tworld.org, number=int(made["identifier"].split("-")[1])).lease_principal_id == tworld.member.pk
    assert json.loads((unbound / ".retasc" / "claims.json").read_text()) == {made["identifier"]: claimed["claimToken"]}


def test_key_list_stays_readable_when_piped(tworld, cli):
    _bound(tworld, cli)
    piped = cli("key", "list")  # the test runner's stdout is not a terminal
    lines = piped.stdout.splitlines()
    assert lines[0].split("\t") == ["id", "prefix", "runtime", "label", "project", "owner", "last used", "status"]
    assert all(len(line.split("\t")) == 8 for line in lines[1:]) and len(lines) >= 2
    assert any(tworld.owner.email in line for line in lines[1:])


def test_issue_search(tworld, cli):
    _bound(tworld, cli)
    new_issue(tworld.a, "数据库连接失败")
    new_issue(tworld.a, "Login page crashes", labels=["bug"])
    new_issue(tworld.a, "Login timeout")
    assert [i["title"] for i in cli.json("issue", "search", "连接")["issues"]] == ["数据库连接失败"]
    assert [i["title"] for i in cli.json("issue", "search", "login", "--label", "bug")["issues"]] == ["Login page crashes"]
    text = cli("issue", "search", "nothing-here")
    assert text.exit_code == 0 and "No issues match." in text.stdout
