"""Imports from files: a Retasc export round trip, beads JSONL, and bad files refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.core.errors import ServiceError
from apps.intake.imports.services import import_run, import_shape, import_start
from apps.intake.models import ImportedRecord, ImportJob
from apps.intake.services import org_export
from apps.issues.chain import verify_folds, verify_org
from apps.issues.models import Issue
from apps.orgs.models import Membership
from apps.orgs.services import actor_for_human, member_add, org_create
from tests.conftest import new_issue

FIXTURES = Path(__file__).parent.parent / "fixtures" / "imports"


def _export(actor) -> dict:
    return json.loads("".join(org_export(actor=actor, format="json").chunks))


def _populate(w):
    from apps.issues.services import attachment_create, comment_create, comment_retract, issue_update, label_save
    from apps.tools import operations

    label_save(actor=w.a, name="backend", color="#112233")
    epic = new_issue(w.a, "Epic: launch", work=False, body="The whole launch.")
    first = new_issue(
        w.a,
        "Secret roadmap",
        body="Launch **in May**.",
        acceptance=["Ships"],
        priority=1,
        labels=["backend"],
        parent=epic.identifier,
    )
    second = new_issue(w.b, "Second step", blocked_by=[first.identifier], due_at="2031-05-01", assignee=w.member.email)
    third = new_issue(w.a, "Related thing", priority=4)
    operations.add_relation(w.a, sourceId=third.identifier, targetId=first.identifier, type="related")
    comment_create(actor=w.a, issue=first.identifier, body="Looks good to me")
    retracted = comment_create(actor=w.b, issue=first.identifier, body="Oops")
    comment_retract(actor=w.b, comment=str(retracted.pk), note="wrong issue")
    attachment_create(actor=w.a, issue=first.identifier, url="https://example.com/spec", title="Spec")
    claim = operations.next_issue(w.a)
    operations.checkpoint(w.a, identifier=claim["issue"]["identifier"], note="Halfway there", claimToken=claim["claimToken"])
    issue_update(actor=w.a, identifier=third.identifier, status="canceled", cancel_reason="Not needed")
    return epic, first, second, third


def _fresh_org(w, *, with_members: bool):
    """A second org of the same server; with_members: the same people are members there."""
    org = org_create(name="Acme copy", owner=w.owner)
    if with_members:
        member_add(org=org, user=w.member)
    return org, actor_for_human(user=w.owner, org=org)


_VOLATILE = {"effectivePriority", "effectiveRank", "slaState", "timeRemainingMs", "exportedAt"}


def differences(a: dict, b: dict, path: str = "") -> list[str]:
    """Field-by-field differences between two exports (lists compared in order)."""
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in _VOLATILE:
                continue
            out += differences(a.get(k), b.get(k), f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)} items"]
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differences(x, y, f"{path}[{n}]")
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")
    return out


def _comparable(export: dict) -> dict:
    """An export minus what identifies the org itself (its slug, name, dates of its own
    rows) and the receipts (each org has its own chain), with row ids replaced by their
    position (ids are per org by construction)."""
    out = {k: v for k, v in export.items() if k not in ("org", "activity", "exportedAt")}
    out["members"] = sorted((m["email"], m["role"], m["status"]) for m in export["members"])
    out["projects"] = [{k: v for k, v in p.items() if k != "createdAt"} for p in export["projects"]]
    out["labels"] = [{k: v for k, v in lb.items() if k != "createdAt"} for lb in export["labels"]]
    for issue in out["issues"]:
        for kind in ("comments", "checkpoints", "attachments"):
            for n, row in enumerate(issue[kind]):
                row["id"] = n
    return out


def test_retasc_round_trip_keeps_everything_but_secrets(world):
    _populate(world)
    first = _export(world.a)
    org, actor = _fresh_org(world, with_members=True)
    job = import_start(actor=actor, source="retasc", upload=json.dumps(first).encode(), filename="acme.json", launch=False)
    job = import_run(job.pk)
    assert job.status == "done", job.summary
    shape = import_shape(job)
    assert shape["counts"]["issues"] == 4 and shape["counts"]["errors"] == 0, shape
    second = _export(actor)
    diffs = differences(_comparable(first), _comparable(second))
    # The new org's own owner membership dates and the like are excluded above; what
    # remains must be nothing at all.
    assert diffs == [], "\n".join(diffs)
    assert verify_org(org) is None and verify_folds(org) == []


def test_round_trip_into_an_org_without_those_people_makes_placeholders(world):
    _populate(world)
    first = _export(world.a)
    org, actor = _fresh_org(world, with_members=False)
    job = import_run(import_start(actor=actor, source="retasc", upload=json.dumps(first).encode(), launch=False).pk)
    assert job.status == "done", job.summary
    second = _export(actor)
    diffs = differences(_comparable(first), _comparable(second))
    placeholder = Membership.objects.get(org=org, status="placeholder", upstream_email=world.member.email)
    # What differs is exactly the member who is not in the new org: a placeholder stands in.
    assert diffs and all(world.member.email in d or placeholder.user.email in d or d.startswith(".members") for d in diffs), (
        "\n".join(diffs)
    )


def test_reimport_of_the_same_export_changes_nothing(world):
    _populate(world)
    upload = json.dumps(_export(world.a)).encode()
    org, actor = _fresh_org(world, with_members=True)
    import_run(import_start(actor=actor, source="retasc", upload=upload, launch=False).pk)
    from apps.issues.models import Activity

    receipts = Activity.objects.filter(org_id=org.pk).count()
    issues = Issue.objects.filter(org_id=org.pk).count()
    job = import_run(import_start(actor=actor, source="retasc", upload=upload, launch=False).pk)
    assert job.status == "done"
    assert job.counts["unchanged"] == 4 and job.counts.get("created", 0) == 0 and job.counts.get("updated", 0) == 0
    assert Issue.objects.filter(org_id=org.pk).count() == issues
    # Only the job's own start and finish receipts.
    assert Activity.objects.filter(org_id=org.pk).count() == receipts + 2


def test_beads_fixture(world):
    upload = (FIXTURES / "beads-issues.jsonl").read_bytes()
    job = import_run(import_start(actor=world.a, source="beads", upload=upload, launch=False).pk)
    assert job.status == "done", job.summary
    issues = {i.identifier: i for i in Issue.objects.filter(org_id=world.org.pk).select_related("project", "parent__project")}
    assert {"BD-1", "BD-2", "BD-3", "BD-4", "BD-5"} <= set(issues)
    epic, child, blocker = issues["BD-1"], issues["BD-2"], issues["BD-3"]
    assert epic.work is False and child.parent_id == epic.pk
    assert issues["BD-4"].status == "done" and issues["BD-4"].closed_at is not None
    assert issues["BD-3"].status == "doing"
    assert issues["BD-3"].priority == 1  # beads P0 (critical) -> urgent
    assert blocker.out_relations.filter(type="blocks", target=child).exists()
    assert sorted(child.labels.values_list("name", flat=True)) == ["backend", "task"]
    assert child.comments.count() == 1
    assert "BD-5" in issues and issues["BD-5"].priority == 0  # P4 backlog -> none
    assert not any(i.title == "Deleted thing" for i in issues.values())  # a tombstone is skipped
    hashed = [i for i in issues.values() if i.title == "Hash id issue"]
    assert hashed and hashed[0].number > 5  # a hash id gets the project's next number
    assert verify_org(world.org) is None and verify_folds(world.org) == []


@pytest.mark.parametrize(
    ("source", "content", "words"),
    [
        ("retasc", b"{not json", "not JSON"),
        ("retasc", json.dumps({"format": "retasc-export", "version": 99, "issues": []}).encode(), "version 99"),
        ("retasc", json.dumps({"format": "something-else"}).encode(), "not a Retasc export"),
        ("beads", b'{"id": "bd-1", "title": "ok"}\n{broken\n', "Line 2"),
        ("beads", b'{"id": "bd-1"}\n', "Line 1"),
    ],
)
def test_bad_files_are_one_sentence_and_write_nothing(world, unchanged, source, content, words):
    jobs = ImportJob.objects.count()
    with unchanged():
        with pytest.raises(ServiceError) as refused:
            import_start(actor=world.a, source=source, upload=content, launch=False)
    assert refused.value.code == "INVALID_ARGUMENT" and refused.value.details.get("field") == "file"
    assert words in refused.value.message and refused.value.message.count(". ") == 0
    assert ImportJob.objects.count() == jobs and ImportedRecord.objects.count() == 0


def test_imports_are_owner_only(world, unchanged):
    with unchanged():
        with pytest.raises(ServiceError) as refused:
            import_start(actor=world.b, source="beads", upload=b'{"id": "bd-1", "title": "x"}', launch=False)
    assert refused.value.code == "FORBIDDEN"


def test_embedded_mode_runs_the_job_in_a_thread(tworld, settings):
    import time

    settings.RETASC_INPROCESS_JOBS = True
    job = import_start(actor=tworld.a, source="beads", upload=(FIXTURES / "beads-issues.jsonl").read_bytes())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in ("done", "failed"):
            break
        time.sleep(0.1)
    assert job.status == "done", job.summary
    assert job.upload_enc is None  # a finished job keeps no copy of the file
    assert Issue.objects.filter(org_id=tworld.org.pk, project__prefix="BD").count() == 6


def test_an_interrupted_file_import_resumes_where_it_stopped(world, monkeypatch):
    from apps.intake.imports import importer as importer_module

    lines = [
        json.dumps(
            {
                "id": f"bd-{n}",
                "title": f"Issue {n}",
                "status": "open",
                "priority": 2,
                "issue_type": "task",
                "created_at": "2025-10-01T09:00:00Z",
                "updated_at": "2025-10-01T09:00:00Z",
            }
        )
        for n in range(1, 451)
    ]
    upload = "\n".join(lines).encode()
    real = importer_module.Importer.write_batch
    calls = {"n": 0}

    def dies_on_the_third_batch(self, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("the process died")
        return real(self, **kwargs)

    monkeypatch.setattr(importer_module.Importer, "write_batch", dies_on_the_third_batch)
    job = import_run(import_start(actor=world.a, source="beads", upload=upload, launch=False).pk)
    assert job.status == "failed" and "resume" in job.summary
    assert job.done == 400 and Issue.objects.filter(org=world.org, project__prefix="BD").count() == 400
    assert job.upload_enc is not None  # kept (sealed) so the job can resume
    monkeypatch.setattr(importer_module.Importer, "write_batch", real)
    again = import_run(import_start(actor=world.a, source="beads", upload=upload, launch=False).pk)
    assert again.pk == job.pk and again.status == "done", again.summary
    assert again.counts["created"] == 450 and again.counts.get("unchanged", 0) == 0
    numbers = sorted(Issue.objects.filter(org=world.org, project__prefix="BD").values_list("number", flat=True))
    assert numbers == list(range(1, 451))
    assert verify_org(world.org) is None and verify_folds(world.org) == []


def test_operator_commands_run_to_the_end_and_print_the_summary(world, settings, monkeypatch, tmp_path):
    import io

    from django.core.management import CommandError, call_command

    from tests.fakes.linear import FakeLinear, LinearData

    out = io.StringIO()
    call_command("import_file", "--org", world.org.slug, str(FIXTURES / "beads-issues.jsonl"), "--json", stdout=out)
    shape = json.loads(out.getvalue())
    assert shape["status"] == "done" and shape["source"] == "beads" and shape["counts"]["issues"] == 6
    out = io.StringIO()
    call_command("import_file", "--org", world.org.slug, str(FIXTURES / "beads-issues.jsonl"), stdout=out)
    assert "6 unchanged" in out.getvalue()

    bad = tmp_path / "export.json"
    bad.write_text(json.dumps({"format": "retasc-export", "version": 7, "issues": []}))
    with pytest.raises(CommandError) as refused:
        call_command("import_file", "--org", world.org.slug, str(bad))
    assert "version 7" in str(refused.value)

    fake = FakeLinear(LinearData.generate(teams=("ENG", "OPS"), issues_per_team=3), api_key="lin_api_cmd").start()
    try:
        settings.RETASC_LINEAR_API_URL = fake.api_url
        monkeypatch.setenv("MY_LINEAR_KEY", "lin_api_cmd")
        out = io.StringIO()
        call_command(
            "import_linear", "--org", world.org.slug, "--api-key-env", "MY_LINEAR_KEY", "--team", "OPS", "--json", stdout=out
        )
        shape = json.loads(out.getvalue())
        assert shape["status"] == "done" and shape["counts"]["issues"] == 3
        assert "lin_api_cmd" not in out.getvalue()
        assert Issue.objects.filter(org=world.org, project__prefix="OPS").count() == 3
        assert not Issue.objects.filter(org=world.org, project__prefix="ENG").exists()
        with pytest.raises(CommandError):
            call_command("import_linear", "--org", world.org.slug, "--api-key-env", "NO_SUCH_VARIABLE_SET")
    finally:
        fake.stop()
