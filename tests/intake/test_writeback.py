"""Writeback: closing the source issue through the provider's API, after commit, with
retries, backoff honouring Retry-After, and idempotence. Against the fake servers."""

from __future__ import annotations

from datetime import timedelta

from apps.intake import writeback
from apps.intake.http import retry_after
from apps.intake.models import Connector, WritebackJob
from apps.intake.tasks import writeback_task
from apps.issues import services as issue_services
from apps.issues.models import Issue
from apps.leases import services as leases
from apps.orgs.services import actor_for_human
from retasc import jobs
from tests.intake import hooks
from tests.intake.hooks import payload


def _synced_issue(world, fake, *, provider="github"):
    """An upstream issue synced in and signed off; the fake knows it as open."""
    if provider == "github":
        c = hooks.connect(world, api_url=fake.url, token=fake.token)
        fake.add_issue("octocat/Hello-World", 1347)
        hooks.github(c, "issues", payload("github", "issues-opened"))
    else:
        c = hooks.connect(world, provider="gitlab", repo="gitlabhq/gitlab-test", api_url=fake.api_url, token=fake.token)
        fake.add_issue("gitlabhq/gitlab-test", 23)
        hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open"))
    issue = Issue.objects.select_related("project").get(source_link__connector_id=c["connectorId"])
    human = actor_for_human(user=world.owner, org=world.org)
    issue_services.issue_triage(actor=human, identifier=issue.identifier, accept=True)
    return c, issue


def _finish(world, issue):
    claim = leases.claim_issue(actor=world.a, identifier=issue.identifier)
    issue_services.issue_update(actor=world.a, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])


def test_done_closes_the_github_issue_once_with_a_comment(world, fake_github):
    c, issue = _synced_issue(world, fake_github)
    _finish(world, issue)
    job = WritebackJob.objects.get()  # written with the action, before any worker ran
    assert (job.state, job.identifier, job.reason) == ("pending", issue.identifier, "completed")
    assert fake_github.requests == []

    assert writeback.writeback_run() == 1
    upstream = fake_github.issue("octocat/Hello-World", 1347)
    assert (upstream["state"], upstream["state_reason"]) == ("closed", "completed")
    assert [x["body"] for x in upstream["comments"]] == [
        f"Closed from Retasc: {issue.identifier} is done.\n\n<!-- retasc:{issue.identifier} -->"
    ]
    patch = fake_github.seen("PATCH")[0]
    assert patch.header("authorization") == f"Bearer {fake_github.token}"
    assert WritebackJob.objects.get().state == "done"
    assert Connector.objects.get(pk=c["connectorId"]).writebacks_count == 1
    assert writeback.writeback_run() == 0  # nothing left: no second comment, no second close
    assert len(fake_github.seen("PATCH")) == 1 and len(upstream["comments"]) == 1


def test_canceled_closes_as_not_planned_and_a_retry_after_a_lost_answer_writes_nothing_twice(world, fake_github):
    _, issue = _synced_issue(world, fake_github)
    human = actor_for_human(user=world.owner, org=world.org)
    issue_services.issue_update(actor=human, identifier=issue.identifier, status="canceled", cancel_reason="dupe")
    upstream = fake_github.issue("octocat/Hello-World", 1347)
    upstream["comments"].append({"id": 1, "body": f"earlier <!-- retasc:{issue.identifier} -->"})  # the comment landed
    upstream["state"] = "closed"  # and so did the close; only the answer was lost
    assert writeback.writeback_run() == 1
    assert fake_github.seen("POST") == [] and fake_github.seen("PATCH") == []


def test_writeback_with_the_fake_down_then_up_closes_once(world, fake_github):
    _, issue = _synced_issue(world, fake_github)
    fake_github.stop()
    _finish(world, issue)  # the action never waits on or fails for the provider
    assert Issue.objects.get(pk=issue.pk).status == "done"
    assert writeback.writeback_run() == 0
    job = WritebackJob.objects.get()
    assert (job.state, job.attempts) == ("pending", 1) and "could not be reached" in job.last_error
    connector = Connector.objects.get()
    assert "could not be reached" in connector.last_error  # shown on the connector page

    fake_github.start()  # back up on the same port
    assert jobs.run_once()["writebacks"] == 1  # the in-process runner (embedded mode)
    upstream = fake_github.issue("octocat/Hello-World", 1347)
    assert upstream["state"] == "closed" and len(upstream["comments"]) == 1
    assert writeback_task.apply().get() == 0  # the Celery task (scaled mode) finds nothing left
    assert len(fake_github.seen("PATCH")) == 1
    assert Connector.objects.get().last_error == ""


def test_rate_limits_are_honoured(world, fake_github, settings, clock):
    _, issue = _synced_issue(world, fake_github)
    _finish(world, issue)
    fake_github.fail_next(1, 429, headers={"Retry-After": "120"})
    assert writeback.writeback_run() == 0
    job = WritebackJob.objects.get()
    assert job.state == "pending" and job.next_attempt_at >= clock.now + timedelta(seconds=120)
    assert writeback.writeback_run() == 0 and len(fake_github.requests) == 1  # not due yet
    clock.advance(seconds=121)
    fake_github.fail_next(1, 403, body={"message": "secondary rate limit"}, headers={"Retry-After": "30"})
    assert writeback.writeback_run() == 0
    assert WritebackJob.objects.get().next_attempt_at >= clock.now + timedelta(seconds=30)
    clock.advance(seconds=31)
    assert writeback.writeback_run() == 1
    assert fake_github.issue("octocat/Hello-World", 1347)["state"] == "closed"


def test_backoff_grows_exponentially_and_permanent_refusals_fail_visibly(world, fake_github, settings):
    settings.RETASC_WRITEBACK_BACKOFF_SECONDS = 10
    assert [writeback.backoff(n, None) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert writeback.backoff(1, 300) == 300
    assert retry_after({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1100"}, now=1000) == 100
    assert retry_after({"retry-after": "7"}) == 7

    _, issue = _synced_issue(world, fake_github)
    fake_github.token = "a-different-token"  # the connector's token no longer works: 401
    _finish(world, issue)
    assert writeback.writeback_run() == 0
    job = WritebackJob.objects.get()
    assert (job.state, job.attempts) == ("failed", 1)
    assert Connector.objects.get().last_error.endswith("Gave up.")
    assert "a-different-token" not in job.last_error and "ghp_test_token" not in Connector.objects.get().last_error


def test_closed_at_source_is_not_written_back(world, fake_github):
    c, issue = _synced_issue(world, fake_github)
    hooks.github(c, "issues", payload("github", "issues-closed"))
    assert Issue.objects.get(pk=issue.pk).status == "canceled"
    assert WritebackJob.objects.count() == 0


def test_gitlab_writeback_closes_with_state_event_and_a_note(world, fake_gitlab):
    _, issue = _synced_issue(world, fake_gitlab, provider="gitlab")
    _finish(world, issue)
    assert writeback.writeback_run() == 1
    upstream = fake_gitlab.issue("gitlabhq/gitlab-test", 23)
    assert upstream["state"] == "closed" and len(upstream["notes"]) == 1
    put = fake_gitlab.seen("PUT")[0]
    assert put.path == "/api/v4/projects/gitlabhq%2Fgitlab-test/issues/23" and put.json == {"state_event": "close"}
    assert put.header("private-token") == fake_gitlab.token
    assert writeback.writeback_run() == 0 and len(fake_gitlab.seen("PUT")) == 1
