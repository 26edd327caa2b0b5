"""`retasc import` against a live Daphne: a beads file followed to the end (--json is the
job's final shape), a Retasc export into a second org, the Linear key from the
environment (never echoed or stored), Ctrl-C leaving the job running, and refusals that
are one sentence and write nothing."""

from __future__ import annotations

import json
import os
import pty
import signal

import pytest

from apps.intake.models import ImportJob
from apps.issues.models import Issue
from apps.orgs.models import Membership
from apps.orgs.services import org_create
from tests.cli.conftest import RETASC, Cli, start_daphne
from tests.conftest import new_issue
from tests.fakes.linear import FakeLinear, LinearData


def beads_lines(n: int, *, prefix: str = "bd") -> str:
    """A beads issues.jsonl: ``n`` issues, each blocked by the one before, labels, one
    closed issue and an assignee who is not a member (a placeholder)."""
    lines = []
    for i in range(1, n + 1):
        record = {
            "id": f"{prefix}-{i}",
            "title": f"Beads issue {i}",
            "description": f"Body {i}",
            "status": "closed" if i == 1 else "open",
            "priority": i % 4,
            "issue_type": "task",
            "labels": ["imported", f"l{i % 3}"],
            "assignee": "ada" if i == 2 else "",
            "created_at": "2025-01-02T03:04:05Z",
            "updated_at": "2025-01-03T03:04:05Z",
        }
        if i == 1:
            record["closed_at"] = "2025-01-04T00:00:00Z"
        if i > 1:
            record["dependencies"] = [
                {
                    "issue_id": f"{prefix}-{i}",
                    "depends_on_id": f"{prefix}-{i - 1}",
                    "type": "blocks",
                    "created_at": "2025-01-02T03:04:05Z",
                }
            ]
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def _jobs():
    return ImportJob.objects


@pytest.fixture(scope="module")
def linear_fake():
    fake = FakeLinear(LinearData.generate(teams=("ENG",), issues_per_team=30)).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def import_server(django_db_setup, linear_fake, tmp_path_factory):
    """Imports run on the server's own thread (the embedded mode's runner), so the CLI
    follows a job that is really in progress; Linear is the fake."""
    server = start_daphne(
        tmp_path_factory.mktemp("daphne-import"), RETASC_INPROCESS_JOBS="true", RETASC_LINEAR_API_URL=linear_fake.api_url
    )
    yield server
    server.stop()


@pytest.fixture
def cli_factory(import_server, tmp_path):
    """Like the package's, on this module's server (no second Daphne)."""
    made = iter(range(100))

    def make(server: str | None = None) -> Cli:
        n = next(made)
        folder = tmp_path / f"repo{n}"
        folder.mkdir()
        return Cli(server=server or import_server.base, config_home=tmp_path / f"config{n}", folder=folder)

    return make


@pytest.fixture
def cli(cli_factory):
    return cli_factory()


@pytest.mark.slow
def test_import_beads_file_follows_to_the_end(tworld, cli):
    cli.sign_in_as(tworld.owner)
    path = cli.folder / "issues.jsonl"
    path.write_text(beads_lines(12))

    job = cli.json("import", "file", str(path))
    assert job["source"] == "beads" and job["status"] == "done", job
    assert job["counts"]["issues"] == 12 and job["counts"]["errors"] == 0 and job["errors"] == []
    assert job["done"] == job["total"] and job["finishedAt"] and job["summary"]
    assert Issue.objects.filter(org=tworld.org).count() == 12

    listed = cli.json("import", "list")["imports"]
    assert [j["importId"] for j in listed] == [job["importId"]]
    again = cli("import", "status", job["importId"], "--no-wait")
    assert again.exit_code == 0 and f"Imported (beads, {job['importId']})" in again.stdout and "12 issues" in again.stdout

    # Text mode: one line of counts; the summary; progress stays off a non-terminal stderr.
    path2 = cli.folder / "more.jsonl"
    path2.write_text(beads_lines(3, prefix="bx"))
    shown = cli("import", "file", str(path2), "--source", "beads")
    assert shown.exit_code == 0, shown.stderr
    assert "Imported (beads," in shown.stdout and "3 issues" in shown.stdout
    assert "Ctrl-C stops following" in shown.stderr


@pytest.mark.slow
def test_import_retasc_export_into_a_second_org(tworld, cli):
    cli.sign_in_as(tworld.owner)
    first = new_issue(tworld.a, "Round trip title", body="Round trip body")
    assert cli("export", "--format", "json", "-o", "org.json").exit_code == 0
    second = org_create(name="Acme Two", owner=tworld.owner)
    job = cli.json("--org", second.slug, "import", "file", "org.json")
    assert job["source"] == "retasc" and job["status"] == "done", job
    copied = Issue.objects.get(org=second, number=first.number)
    assert copied.title == "Round trip title" and copied.body == "Round trip body"


@pytest.mark.slow
def test_refusals_are_one_sentence_and_write_nothing(tworld, cli_factory):
    owner, member = cli_factory(), cli_factory()
    owner.sign_in_as(tworld.owner)
    member.sign_in_as(tworld.member)
    before = (Issue.objects.count(), _jobs().count(), Membership.objects.count())

    bad = owner.folder / "broken.jsonl"
    bad.write_text('{"id": "bd-1", "title": "fine"}\n{"id": "bd-2", "title": \n')
    refused = owner("import", "file", str(bad), "--source", "beads")
    assert refused.exit_code == 1, refused.output
    assert refused.stderr.startswith("Error: ") and "(INVALID_ARGUMENT)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    version = owner.folder / "future.json"
    version.write_text(json.dumps({"format": "retasc-export", "version": 999, "issues": []}))
    refused = owner("import", "file", str(version))
    assert refused.exit_code == 1 and "(INVALID_ARGUMENT)" in refused.stderr, refused.stderr

    unknown = owner.folder / "notes.txt"
    unknown.write_text("just some notes\n")
    refused = owner("import", "file", str(unknown))
    assert refused.exit_code == 2
    assert "neither a Retasc export (JSON) nor a beads issues.jsonl" in refused.stderr

    missing = owner("import", "file", str(owner.folder / "nope.jsonl"))
    assert missing.exit_code == 5 and "Cannot read" in missing.stderr

    good = member.folder / "issues.jsonl"
    good.write_text(beads_lines(2))
    refused = member("import", "file", str(good))
    assert refused.exit_code == 1 and "(FORBIDDEN)" in refused.stderr

    no_key = owner("import", "linear", "--team", "ENG")  # not a terminal, LINEAR_API_KEY unset
    assert no_key.exit_code == 1 and "Set LINEAR_API_KEY" in no_key.stderr
    assert (Issue.objects.count(), _jobs().count(), Membership.objects.count()) == before


@pytest.mark.slow
def test_ctrl_c_stops_following_and_the_import_finishes(tworld, cli):
    cli.sign_in_as(tworld.owner)
    path = cli.folder / "big.jsonl"
    path.write_text(beads_lines(300))
    proc = cli.popen("import", "file", str(path))
    try:
        line = proc.stderr.readline()
        assert "started; Ctrl-C stops following" in line, line
        import_id = line.split()[1]
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert f"import {import_id} keeps running on the server" in stderr
    assert f"retasc import status {import_id}" in stderr
    job = cli.json("import", "status", import_id)  # follows it again, to the end
    assert job["status"] == "done" and job["counts"]["issues"] == 300


@pytest.mark.slow
def test_linear_key_from_the_environment_never_echoed_or_stored(tworld, cli, linear_fake, import_server):
    cli.sign_in_as(tworld.owner)
    secret = linear_fake.api_key
    cli.env_extra["LINEAR_API_KEY"] = secret
    # Linear fails the first page once: the job fails (exit 1, the summary says to resume) ...
    linear_fake.fail_page_once("ENG", 0)
    failed = cli("import", "linear", "--team", "eng")
    assert failed.exit_code == 1, failed.output
    assert "Import failed (linear," in failed.stdout and "resume" in failed.stdout, failed.stdout
    # ... and the same import started again resumes it to the end.
    result = cli("import", "linear", "--team", "eng", "--json")
    assert result.exit_code == 0, result.stderr
    job = json.loads(result.stdout)
    assert job["source"] == "linear" and job["status"] == "done" and job["counts"]["issues"] == 30, job
    assert job["importId"] in failed.stdout
    assert Issue.objects.filter(org=tworld.org, project__prefix="ENG").count() == 30
    assert linear_fake.mutations == 0
    assert secret not in result.stdout + result.stderr + failed.stdout + failed.stderr
    for stored in cli.config_home.rglob("*"):
        if stored.is_file():
            assert secret not in stored.read_text(errors="replace")
    assert secret not in import_server.log()

    # A wrong key is refused up front in one sentence; nothing is written.
    before = (Issue.objects.count(), _jobs().count())
    cli.env_extra["LINEAR_API_KEY"] = "lin_api_wrong"
    refused = cli("import", "linear", "--team", "ENG")
    assert refused.exit_code == 1, refused.output
    assert refused.stderr.startswith("Error: ") and "(INVALID_ARGUMENT)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "lin_api_wrong" not in refused.stderr
    assert (Issue.objects.count(), _jobs().count()) == before


@pytest.mark.slow
def test_linear_key_asked_without_echo_on_a_terminal(tworld, cli, linear_fake):
    """No LINEAR_API_KEY: on a terminal the key is asked for with echo off (getpass)."""
    cli.sign_in_as(tworld.owner)
    env = {**os.environ, **cli.env(), "PYTHONUNBUFFERED": "1"}
    env.pop("LINEAR_API_KEY", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: retasc on the terminal
        os.chdir(cli.folder)
        os.execve(str(RETASC), [str(RETASC), "import", "linear", "--team", "ENG", "--no-wait", "--json"], env)
    seen = b""
    try:
        while b"Linear API key (not shown): " not in seen:
            seen += os.read(fd, 1024)
        os.write(fd, linear_fake.api_key.encode() + b"\n")
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        _, status = os.waitpid(pid, 0)
    text = seen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert linear_fake.api_key not in text  # not echoed
    answer = json.loads(text[text.index("{") :])
    assert answer["status"] in ("queued", "running", "done")
    assert _jobs().get(pk=answer["importId"]).source == "linear"
    cli.json("import", "status", answer["importId"])  # let it finish before the test ends


@pytest.mark.parametrize(
    ("text", "source"),
    [
        ('{\n  "format": "retasc-export",\n  "version": 1,\n  "issues": []\n}\n', "retasc"),
        ('{"format": "retasc-export", "version": 1, "issues": []}', "retasc"),
        ('\ufeff{"id": "bd-1", "title": "One"}\n{"id": "bd-2", "title": "Two"}\n', "beads"),
        ('\n\n{"id": "bd-1", "title": "One"}\n', "beads"),
    ],
)
def test_detect_source(text, source, tmp_path):
    from retasc.cli.imports import detect_source

    assert detect_source(tmp_path / "f", text.encode()) == source


@pytest.mark.parametrize("text", ["", "just notes\n", "[1, 2]\n", "<html></html>"])
def test_detect_source_refuses_what_it_cannot_name(text, tmp_path):
    from retasc.cli.errors import CliError
    from retasc.cli.imports import detect_source

    with pytest.raises(CliError) as refused:
        detect_source(tmp_path / "f", text.encode())
    assert refused.value.exit_code == 2 and "--source retasc or --source beads" in refused.value.message
