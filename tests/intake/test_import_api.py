"""POST/GET /api/v1/imports and the placeholder endpoints: thin views over the services."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.intake import tasks
from apps.intake.models import ImportJob
from apps.issues.models import Issue
from apps.orgs.models import Membership
from tests.api.conftest import client
from tests.fakes.linear import FakeLinear, LinearData

FIXTURES = Path(__file__).parent.parent / "fixtures" / "imports"
KEY = "lin_api_testkey"


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def worker_runs_queued_imports(monkeypatch):
    """With REDIS_URL set (the scaled suite) a started import goes to Celery, and no worker
    runs in these tests: the task runs where it is queued, as a worker would run it (the
    Linear key sealed in the row included)."""
    monkeypatch.setattr(tasks.import_task, "delay", lambda job_id: tasks.import_task.run(job_id))


@pytest.fixture
def fake_linear(settings):
    fake = FakeLinear(LinearData.generate(issues_per_team=4), api_key=KEY).start()
    settings.RETASC_LINEAR_API_URL = fake.api_url
    yield fake
    fake.stop()


def _upload(source: str, content: bytes, name="issues.jsonl"):
    return {"source": source, "file": SimpleUploadedFile(name, content, content_type="application/octet-stream")}


def test_file_import_over_the_api(world, django_capture_on_commit_callbacks):
    owner = client(world.owner_agent.raw)
    with django_capture_on_commit_callbacks(execute=True):
        r = owner.post("/api/v1/imports", _upload("beads", (FIXTURES / "beads-issues.jsonl").read_bytes()), format="multipart")
    assert r.status_code == 202, r.content
    body = r.json()
    assert set(body) == {"importId", "status"}
    got = owner.get(f"/api/v1/imports/{body['importId']}").json()
    assert got["status"] == "done" and got["source"] == "beads" and got["counts"]["issues"] == 6, got
    assert set(got) == {
        "importId",
        "source",
        "status",
        "counts",
        "total",
        "done",
        "errors",
        "summary",
        "createdAt",
        "startedAt",
        "finishedAt",
    }
    assert set(got["counts"]) == {
        "projects",
        "issues",
        "comments",
        "labels",
        "relations",
        "attachments",
        "people",
        "created",
        "updated",
        "unchanged",
        "skipped",
        "errors",
    }
    listed = owner.get("/api/v1/imports").json()["imports"]
    assert [j["importId"] for j in listed] == [body["importId"]]


def test_linear_import_over_the_api(world, fake_linear, django_capture_on_commit_callbacks):
    owner = client(world.owner_agent.raw)
    with django_capture_on_commit_callbacks(execute=True):
        r = owner.post("/api/v1/imports", {"source": "linear", "apiKey": KEY, "teams": ["ENG"]}, format="json")
    assert r.status_code == 202, r.content
    got = owner.get(f"/api/v1/imports/{r.json()['importId']}").json()
    assert got["status"] == "done" and got["counts"]["issues"] == 4
    assert Issue.objects.filter(org=world.org, project__prefix="ENG").count() == 4
    assert KEY not in json.dumps(got)


@pytest.mark.parametrize(
    ("payload", "fmt", "field", "code"),
    [
        ({"source": "linear"}, "json", "apiKey", "INVALID_ARGUMENT"),
        ({"source": "jira", "apiKey": "x"}, "json", "source", "INVALID_ARGUMENT"),
        ({"source": "linear", "apiKey": "lin_api_wrong"}, "json", "apiKey", "INVALID_ARGUMENT"),
        ({"source": "linear", "apiKey": KEY, "teams": ["NOPE"]}, "json", "teams", "INVALID_ARGUMENT"),
        ({"source": "linear", "apiKey": KEY, "extra": 1}, "json", "extra", "INVALID"),  # unknown field: SPEC §5
        (None, "multipart", "file", "INVALID_ARGUMENT"),
    ],
)
def test_bad_input_is_400_with_the_field_and_writes_nothing(world, fake_linear, unchanged, payload, fmt, field, code):
    owner = client(world.owner_agent.raw)
    if payload is None:
        payload = _upload("retasc", json.dumps({"format": "retasc-export", "version": 2}).encode(), "x.json")
    with unchanged():
        r = owner.post("/api/v1/imports", payload, format=fmt)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == code and r.json()["field"] == field
    assert ImportJob.objects.count() == 0


def test_members_and_outsiders_are_refused(world, unchanged):
    with unchanged():
        r = client(world.member_agent.raw).post(
            "/api/v1/imports", _upload("beads", b'{"id":"bd-1","title":"x"}'), format="multipart"
        )
    assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    job = ImportJob.objects.create(org=world.org, source="beads")
    assert client(world.outsider_agent.raw).get(f"/api/v1/imports/{job.pk}").status_code in (403, 404)
    other_owner = client(world.outsider_agent.raw)
    assert other_owner.get("/api/v1/imports/not-a-uuid").status_code in (403, 404)
    assert client(world.member_agent.raw).get(f"/api/v1/imports/{job.pk}").status_code == 403


def test_merge_endpoint(world, fake_linear, django_capture_on_commit_callbacks):
    owner = client(world.owner_agent.raw)
    with django_capture_on_commit_callbacks(execute=True):
        owner.post("/api/v1/imports", {"source": "linear", "apiKey": KEY}, format="json")
    members = owner.get("/api/v1/members").json()
    listed = members["members"] if isinstance(members, dict) else members
    placeholders = [m for m in listed if m["placeholder"]]
    assert placeholders
    target = placeholders[0]["memberId"]
    r = client(world.member_agent.raw).post(f"/api/v1/members/{target}/merge", {"into": world.member.email}, format="json")
    assert r.status_code == 403
    r = owner.post(f"/api/v1/members/{target}/merge", {"into": world.member.email}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["email"] == world.member.email and r.json()["placeholder"] is False
    assert Membership.objects.get(pk=target).status == "retired"
    # Claiming one whose upstream address is not yours: 403.
    other = next(m for m in placeholders if m["memberId"] != target)
    r = client(world.member_agent.raw).post(f"/api/v1/members/{other['memberId']}/claim", format="json")
    assert r.status_code == 403
