"""GitLab deliveries: the token header, Event-UUID dedup, Issue / Note / Merge Request hooks."""

from __future__ import annotations

from datetime import date

from django.utils import timezone

from apps.intake.models import Delivery
from apps.issues.models import Comment, Issue
from tests.conftest import new_issue, snapshot
from tests.intake import hooks
from tests.intake.hooks import payload

REPO = "gitlabhq/gitlab-test"


def _synced(c) -> Issue:
    return Issue.objects.select_related("project").get(source_link__connector_id=c["connectorId"])


def test_issue_hook_open_update_close_reopen(world):
    c = hooks.connect(world, provider="gitlab", repo=REPO)
    r = hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open"), delivery="u-1")
    assert r.status_code == 202 and r.json()["issue"] == "ACME-1"
    issue = _synced(c)
    assert (issue.title, issue.awaiting_triage, issue.source) == ("New API: create/update/delete file", True, "gitlab")
    assert sorted(issue.labels.values_list("name", flat=True)) == ["API", "support"]
    assert timezone.localtime(issue.due_at, timezone.get_fixed_timezone(0)).date() == date(2026, 12, 1)
    assert issue.author.get_full_name() == "root (GitLab)"

    Issue.objects.filter(pk=issue.pk).update(awaiting_triage=False)
    hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-update"))
    issue = _synced(c)
    assert (issue.title, issue.awaiting_triage) == ("New API: create, update and delete files", True)

    hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-close"))
    assert (_synced(c).status, _synced(c).cancel_reason) == ("canceled", "closed at source")
    hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-reopen"))
    assert (_synced(c).status, _synced(c).awaiting_triage) == ("todo", True)
    assert Issue.objects.filter(org=world.org).count() == 1


def test_token_header_and_replay(world):
    c = hooks.connect(world, provider="gitlab", repo=REPO)
    before = snapshot()
    r = hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open"), token="wrong")
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")
    assert snapshot() == before and Delivery.objects.count() == 0
    assert hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open"), delivery="same").status_code == 202
    before = snapshot()
    r = hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open"), delivery="same")
    assert (r.status_code, r.json()["code"]) == (200, "DUPLICATE") and snapshot() == before


def test_note_hook_comment_from_a_placeholder(world):
    c = hooks.connect(world, provider="gitlab", repo=REPO)
    hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open"))
    r = hooks.gitlab(c, "Note Hook", payload("gitlab", "note-issue"))
    assert r.json()["outcome"] == "applied"
    comment = Comment.objects.select_related("author").get(issue=_synced(c))
    assert (comment.body, comment.author.get_full_name()) == ("Hello world", "jsmith (GitLab)")
    assert comment.author.has_usable_password() is False and comment.author.is_active is False
    assert comment.author.email.endswith(".invalid")


def test_merge_request_hook_pr_sync(world):
    c = hooks.connect(world, provider="gitlab", repo=REPO, pr_sync=True)
    issue = new_issue(world.a, "Viewport")
    mr = payload("gitlab", "merge_request-merge")
    mr["object_attributes"]["description"] = f"Closes {issue.identifier}"
    assert hooks.gitlab(c, "Merge Request Hook", mr).json()["outcome"] == "applied"
    assert Issue.objects.get(pk=issue.pk).status == "done"
    other = new_issue(world.a, "Other")
    closed = payload("gitlab", "merge_request-merge")
    closed["object_attributes"].update(action="close", state="closed", description=f"Fixes {other.identifier}")
    assert hooks.gitlab(c, "Merge Request Hook", closed).json()["outcome"] == "ignored"
    assert Issue.objects.get(pk=other.pk).status == "todo"
