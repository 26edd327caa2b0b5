"""The Linear import against a fake Linear GraphQL server (tests/fakes/linear.py):
2,000 issues with relations and comments, a rate limit honoured, a failed page resumed,
identifiers preserved, the chain intact, no plaintext at rest, a re-import that changes
only what changed upstream, a placeholder claimed, and a wrong key refused cleanly."""

from __future__ import annotations

import json
import logging

import pytest
from allauth.account.models import EmailAddress
from django.db import connection

from apps.core.errors import ServiceError
from apps.intake.imports.people import placeholder_claim, placeholder_merge
from apps.intake.imports.services import import_run, import_shape, import_start
from apps.intake.models import ImportedRecord, ImportJob
from apps.issues.chain import verify_folds, verify_org
from apps.issues.models import Activity, Comment, Issue, Relation
from apps.orgs.models import Membership, Project
from apps.orgs.services import actor_for_human, member_add, user_get_or_create
from tests.conftest import new_issue
from tests.core.test_encryption_at_rest import _needles, _pg_rows_as_text, _read_outside, _sqlite_files
from tests.fakes.linear import FakeLinear, LinearData

KEY = "lin_api_testkey"


@pytest.fixture
def linear(settings):
    def start(data: LinearData) -> FakeLinear:
        fake = FakeLinear(data, api_key=KEY).start()
        settings.RETASC_LINEAR_API_URL = fake.api_url
        started.append(fake)
        return fake

    started: list[FakeLinear] = []
    yield start
    for fake in started:
        fake.stop()


def _run(actor, teams=None, sleeps=None):
    job = import_start(actor=actor, source="linear", api_key=KEY, teams=teams, launch=False)
    return import_run(job.pk, api_key=KEY, sleep=(sleeps.append if sleeps is not None else (lambda s: None)))


@pytest.mark.timeout(1200)  # 2,000 issues imported twice; a loaded machine takes minutes
def test_two_thousand_issues_resume_reconcile_and_claim(tworld, linear, caplog):
    caplog.set_level(logging.DEBUG)
    data = LinearData.generate(teams=("ENG", "OPS"), issues_per_team=1000, comments=2)
    for node in data.issues:  # OPS numbers start at 40: the counter continues after the highest
        if node["team"]["key"] == "OPS":
            node["number"] += 39
            node["identifier"] = f"OPS-{node['number']}"
    fake = linear(data)
    fake.throttle_once_at(4)
    fake.fail_page_once("ENG", 5)
    w = tworld
    owner = actor_for_human(user=w.owner, org=w.org)
    sleeps: list = []

    first = _run(owner, ["ENG", "OPS"], sleeps)
    assert first.status == "failed" and "resume" in first.summary, first.summary
    assert first.done == 250 and len(sleeps) == 1 and 0 <= sleeps[0] <= 1  # the rate limit, waited out once
    assert first.checkpoint["cursor"] == "cursor:250" and first.secret_enc is None

    second = _run(owner, ["ENG", "OPS"])
    assert second.pk == first.pk and second.status == "done", second.summary
    # Resumed from the cursor: no page was read twice, none skipped.
    assert len(fake.pages_served) == len(set(fake.pages_served)) == 40
    shape = import_shape(second)
    assert shape["counts"]["issues"] == 2000 and shape["counts"]["created"] == 2000, shape
    assert shape["counts"]["errors"] == 0 and shape["total"] == 2000 and shape["done"] >= 2000
    assert shape["counts"]["comments"] == 4000 and shape["counts"]["relations"] > 400
    assert fake.mutations == 0

    issues = Issue.objects.filter(org_id=w.org.pk).select_related("project")
    assert issues.count() == 2000
    idents = {i.identifier for i in issues}
    assert idents == {n["identifier"] for n in data.issues}
    assert Project.objects.get(org=w.org, prefix="OPS").issue_seq == 1039
    assert new_issue(w.a, "After the import", project="OPS").identifier == "OPS-1040"
    eng = {i.number: i for i in issues if i.project.prefix == "ENG"}
    assert eng[1].status == "todo" and eng[1].awaiting_triage  # triage
    assert eng[4].status == "doing" and eng[5].status == "done" and eng[6].status == "canceled"
    assert eng[5].closed_at.isoformat().startswith("2025-01-03")  # completedAt, backdated
    assert eng[1].created_at.isoformat().startswith("2025-01-01")
    assert [eng[n].priority for n in (1, 2, 3, 4, 5)] == [0, 1, 2, 3, 4]
    assert eng[1].work is False and eng[2].parent_id == eng[1].pk and eng[3].parent_id == eng[1].pk
    assert Relation.objects.filter(source=eng[2], target=eng[5], type="blocks").exists()
    replies = Comment.objects.filter(issue=eng[2]).order_by("created_at")
    assert [c.body.startswith("(in reply to") for c in replies] == [False, True]
    receipt = Activity.objects.filter(issue=eng[5], verb="imported").get()
    assert receipt.changes["import"]["ref"] == "ENG-5" and receipt.changes["import"]["source"] == "linear"
    assert receipt.changes["createdAt"][1].startswith("2025-01-01") and receipt.changes["closedAt"][1].startswith("2025-01-03")

    # The chain verifies (folding the receipts back into every issue is checked at the end).
    assert verify_org(w.org) is None

    # No plaintext at rest (titles, descriptions, comments), and the key is nowhere.
    marker = "LINSECRETENG7."
    if connection.vendor == "sqlite":
        raw = b"".join(_read_outside(p) for p in _sqlite_files())
    else:
        raw = _pg_rows_as_text().encode()
    for needle in _needles(marker) + _needles("Comment 1 on ENG-7") + _needles(KEY):
        assert needle not in raw
    assert KEY not in caplog.text and KEY not in json.dumps(list(ImportJob.objects.values("params", "summary", "errors")))

    # Upstream edits: two issues change, one is new. Only they get receipts.
    by_id = {n["identifier"]: n for n in data.issues}
    by_id["ENG-10"]["title"] = "ENG-10 renamed upstream"
    by_id["OPS-45"]["state"] = {"id": "state-completed", "name": "Done", "type": "completed"}
    by_id["OPS-45"]["completedAt"] = "2025-03-01T00:00:00.000Z"
    new = dict(by_id["ENG-20"], id="issue-ENG-new", identifier="ENG-1001", number=1001, title="Brand new upstream")
    new["comments"] = {"nodes": []}
    new["attachments"] = {"nodes": []}
    new["relations"] = {"nodes": []}
    data.issues.insert(1000, new)
    seq = Activity.objects.filter(org_id=w.org.pk).order_by("-seq").values_list("seq", flat=True).first()
    again = _run(owner, ["ENG", "OPS"])
    assert again.pk != first.pk and again.status == "done", again.summary
    c = again.counts
    assert (c.get("created"), c.get("updated"), c.get("unchanged")) == (1, 2, 1998), c
    touched = set(Activity.objects.filter(org_id=w.org.pk, seq__gt=seq).exclude(issue=None).values_list("issue_id", flat=True))
    changed = {
        i.pk
        for i in Issue.objects.filter(org_id=w.org.pk).select_related("project")
        if i.identifier in ("ENG-10", "OPS-45", "ENG-1001")
    }
    assert touched == changed
    assert Issue.objects.filter(org_id=w.org.pk).count() == 2002  # 2,000, the one made after, the new one
    renamed = Issue.objects.get(project__org=w.org, project__prefix="ENG", number=10)
    assert renamed.title == "ENG-10 renamed upstream"
    assert Issue.objects.get(project__org=w.org, project__prefix="OPS", number=45).status == "done"
    assert verify_org(w.org) is None

    # A placeholder claimed: person1 joins with that verified address and claims it.
    placeholder = Membership.objects.get(org=w.org, status="placeholder", upstream_email="person1@linear.test")
    lanes = Issue.objects.filter(org_id=w.org.pk, assignee_id=placeholder.user_id).count()
    authored = Issue.objects.filter(org_id=w.org.pk, author_id=placeholder.user_id).count()
    assert lanes and authored
    person, _ = user_get_or_create(email="person1@linear.test", password="pw-person-1")
    member_add(org=w.org, user=person)
    me = actor_for_human(user=person, org=w.org)
    with pytest.raises(ServiceError) as refused:  # someone else cannot claim it
        placeholder_claim(actor=actor_for_human(user=w.member, org=w.org), placeholder=placeholder.pk)
    assert refused.value.code == "FORBIDDEN"
    placeholder_claim(actor=me, placeholder=placeholder.pk)
    assert Issue.objects.filter(org_id=w.org.pk, assignee_id=person.pk).count() == lanes
    assert Issue.objects.filter(org_id=w.org.pk, author_id=person.pk).count() == authored
    assert not Issue.objects.filter(org_id=w.org.pk, assignee_id=placeholder.user_id).exists()
    assert Activity.objects.filter(org_id=w.org.pk, verb="placeholder_claimed").count() == 1
    assert Membership.objects.get(pk=placeholder.pk).status == "retired"
    assert verify_org(w.org) is None and verify_folds(w.org) == []
    # A later re-import maps that upstream person to the member directly.
    assert ImportedRecord.objects.filter(org=w.org, kind="person", object_id=str(person.pk)).exists()


def test_wrong_key_is_refused_and_writes_nothing(world, linear, unchanged, caplog):
    linear(LinearData.generate(issues_per_team=3))
    jobs, people = ImportJob.objects.count(), Membership.objects.count()
    with unchanged():
        with pytest.raises(ServiceError) as refused:
            import_start(actor=world.a, source="linear", api_key="lin_api_wrong", launch=False)
    assert refused.value.code == "INVALID_ARGUMENT" and refused.value.details["field"] == "apiKey"
    assert "refused the API key" in refused.value.message and "lin_api_wrong" not in refused.value.message
    assert "lin_api_wrong" not in caplog.text
    assert ImportJob.objects.count() == jobs and Membership.objects.count() == people


def test_unknown_team_is_refused_up_front(world, linear, unchanged):
    linear(LinearData.generate(issues_per_team=3))
    with unchanged():
        with pytest.raises(ServiceError) as refused:
            import_start(actor=world.a, source="linear", api_key=KEY, teams=["NOPE"], launch=False)
    assert refused.value.details["field"] == "teams" and "NOPE" in refused.value.message


def test_scaled_mode_seals_the_key_for_the_worker_and_wipes_it(world, linear, settings, django_capture_on_commit_callbacks):
    linear(LinearData.generate(issues_per_team=5))
    settings.RETASC_INPROCESS_JOBS = False
    settings.REDIS_URL = "redis://127.0.0.1:6379/1"
    seen = {}

    from apps.intake import tasks

    def delay(job_id):  # the worker's side: the key comes sealed in the row
        job = ImportJob.objects.get(pk=job_id)
        seen["sealed"] = bytes(job.secret_enc or b"")
        seen["secret"] = job.secret
        return tasks.import_task.run(job_id)

    settings_delay = tasks.import_task.delay
    tasks.import_task.delay = delay
    try:
        with django_capture_on_commit_callbacks(execute=True):
            job = import_start(actor=world.a, source="linear", api_key=KEY)
    finally:
        tasks.import_task.delay = settings_delay
    job.refresh_from_db()
    assert seen["secret"] == KEY and KEY.encode() not in seen["sealed"]
    assert job.status == "done" and job.secret_enc is None and job.counts["issues"] == 5


def test_owner_merges_a_placeholder(world, linear):
    linear(LinearData.generate(issues_per_team=6))
    job = _run(world.a)
    assert job.status == "done"
    placeholder = Membership.objects.filter(org=world.org, status="placeholder").order_by("pk").first()
    with pytest.raises(ServiceError) as refused:
        placeholder_merge(actor=world.b, placeholder=placeholder.pk, into=world.member.email)
    assert refused.value.code == "FORBIDDEN"
    merged = placeholder_merge(actor=world.a, placeholder=placeholder.pk, into=world.member.email)
    assert merged.user_id == world.member.pk
    assert not Issue.objects.filter(org=world.org, author_id=placeholder.user_id).exists()
    assert Activity.objects.filter(org_id=world.org.pk, verb="placeholder_merged").count() == 1
    assert verify_org(world.org) is None and verify_folds(world.org) == []
    assert EmailAddress.objects.filter(user_id=placeholder.user_id).count() == 0  # it never could sign in


def test_closed_upstream_ends_a_live_claim_on_reimport(world, linear):
    from apps.issues.models import Claim
    from apps.tools import operations

    data = LinearData.generate(issues_per_team=6)
    linear(data)
    assert _run(world.a).status == "done"
    held = operations.claim_issue(world.a, identifier="ENG-3")
    assert held["claimToken"]
    node = next(n for n in data.issues if n["identifier"] == "ENG-3")
    node["state"] = {"id": "state-completed", "name": "Done", "type": "completed"}
    node["completedAt"] = "2025-02-01T00:00:00.000Z"
    again = _run(world.a)
    assert again.status == "done" and again.counts["updated"] == 1
    issue = Issue.objects.get(org=world.org, project__prefix="ENG", number=3)
    assert issue.status == "done" and issue.lease_claim_id is None
    assert not Claim.objects.filter(issue=issue, ended_at__isnull=True).exists()
    assert verify_org(world.org) is None and verify_folds(world.org) == []
