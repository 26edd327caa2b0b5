"""GitHub deliveries: verification, deduplication, the log, and normalization."""

from __future__ import annotations

from datetime import UTC, datetime

from apps.intake.models import Connector, Delivery, SourceIssue
from apps.issues.models import Comment, Issue
from apps.leases import services as leases
from apps.orgs.models import Membership
from tests.conftest import new_issue, snapshot
from tests.intake import hooks
from tests.intake.hooks import payload


def _intake_state():
    return (
        snapshot(),
        list(Delivery.objects.values_list("delivery_id", "outcome")),
        list(Connector.objects.values_list("pk", "deliveries_count", "live", "issues_count")),
        SourceIssue.objects.count(),
    )


def _synced(connector) -> Issue:
    return Issue.objects.select_related("project").get(source_link__connector_id=connector["connectorId"])


def test_ping_marks_the_connector_live(world):
    c = hooks.connect(world)
    assert Connector.objects.get(pk=c["connectorId"]).live is False
    r = hooks.github(c, "ping", payload("github", "ping"))
    assert r.status_code == 202 and r.json()["code"] == "ACCEPTED"
    row = Connector.objects.get(pk=c["connectorId"])
    assert (row.live, row.deliveries_count) == (True, 1)
    assert list(Delivery.objects.values_list("event", "outcome")) == [("ping", "applied")]


def test_opened_issue_arrives_quarantined_with_support_label_and_due_date(world):
    c = hooks.connect(world)
    data = payload("github", "issues-opened")
    data["issue"]["milestone"] = payload("github", "issues-milestoned")["milestone"]
    r = hooks.github(c, "issues", data, delivery="d-1")
    assert r.status_code == 202 and r.json()["issue"] == "ACME-1"
    issue = _synced(c)
    assert (issue.title, issue.body, issue.awaiting_triage, issue.status, issue.source) == (
        "Found a bug",
        "I'm having a problem with this.",
        True,
        "todo",
        "github",
    )
    assert sorted(issue.labels.values_list("name", flat=True)) == ["bug", "support"]
    assert issue.due_at == datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
    author = Membership.objects.select_related("user").get(org=world.org, user_id=issue.author_id)
    assert author.status == "placeholder" and author.user.get_full_name() == "octocat (GitHub)"
    # Never dispatched before sign-off: the empty pull counts it as awaiting triage.
    answer = leases.next_issue(actor=world.a)
    assert answer["issue"] is None and answer["awaitingTriage"] == 1
    log = Delivery.objects.get(delivery_id="d-1")
    assert (log.event, log.action, log.outcome, log.issue) == ("issues", "opened", "applied", "ACME-1")


def test_bad_signature_is_401_and_writes_nothing(world):
    c = hooks.connect(world)
    other = hooks.connect(world, repo="octocat/Other")
    before = _intake_state()
    r = hooks.github(c, "issues", payload("github", "issues-opened"), signature="sha256=" + "0" * 64)
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")
    r = hooks.github(c, "issues", payload("github", "issues-opened"), signature="")
    assert r.status_code == 401
    # A valid signature, but by another connector's secret.
    body_signed_by_other = {**c, "secret": other["secret"]}
    assert hooks.github(body_signed_by_other, "issues", payload("github", "issues-opened")).status_code == 401
    assert _intake_state() == before and Delivery.objects.count() == 0


def test_a_replayed_delivery_answers_200_and_writes_nothing(world):
    c = hooks.connect(world)
    data = payload("github", "issues-opened")
    assert hooks.github(c, "issues", data, delivery="same").status_code == 202
    before = _intake_state()
    r = hooks.github(c, "issues", data, delivery="same")
    assert (r.status_code, r.json()["code"]) == (200, "DUPLICATE")
    assert _intake_state() == before
    assert Issue.objects.filter(org=world.org).count() == 1


def test_unknown_and_revoked_connectors(world):
    c = hooks.connect(world)
    unknown = {**c, "connectorId": "7b6f1c7e-0000-4000-8000-000000000000"}
    r = hooks.github(unknown, "ping", payload("github", "ping"))
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
    assert hooks.github({**c, "connectorId": "not-a-uuid"}, "ping", payload("github", "ping")).status_code == 404
    assert hooks.gitlab(c, "Issue Hook", payload("gitlab", "issue-open")).status_code == 404  # wrong provider's door
    Connector.objects.filter(pk=c["connectorId"]).update(revoked_at=datetime.now(UTC))
    before = _intake_state()
    r = hooks.github(c, "issues", payload("github", "issues-opened"))
    assert (r.status_code, r.json()["code"]) == (410, "GONE")
    assert _intake_state() == before


def test_an_upstream_edit_updates_and_re_quarantines(world):
    c = hooks.connect(world)
    hooks.github(c, "issues", payload("github", "issues-opened"))
    issue = _synced(c)
    Issue.objects.filter(pk=issue.pk).update(awaiting_triage=False)  # signed off meanwhile
    r = hooks.github(c, "issues", payload("github", "issues-edited"))
    assert r.status_code == 202 and r.json()["outcome"] == "applied"
    issue = _synced(c)
    assert (issue.title, issue.body, issue.awaiting_triage) == ("Found a bug in the parser", "It fails on empty input.", True)
    assert Issue.objects.filter(org=world.org).count() == 1  # one upstream issue, one Retasc issue


def test_labels_and_milestone_follow_the_source_without_quarantine(world):
    c = hooks.connect(world)
    hooks.github(c, "issues", payload("github", "issues-opened"))
    Issue.objects.filter(source_link__connector_id=c["connectorId"]).update(awaiting_triage=False)
    hooks.github(c, "issues", payload("github", "issues-labeled"))
    hooks.github(c, "issues", payload("github", "issues-milestoned"))
    issue = _synced(c)
    assert sorted(issue.labels.values_list("name", flat=True)) == ["bug", "enhancement", "support"]
    assert issue.due_at == datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
    assert issue.awaiting_triage is False


def test_closed_upstream_cancels_unless_done_and_reopened_quarantines(world):
    c = hooks.connect(world)
    hooks.github(c, "issues", payload("github", "issues-opened"))
    hooks.github(c, "issues", payload("github", "issues-closed"))
    issue = _synced(c)
    assert (issue.status, issue.cancel_reason) == ("canceled", "closed at source")
    hooks.github(c, "issues", payload("github", "issues-reopened"))
    issue = _synced(c)
    assert (issue.status, issue.awaiting_triage, issue.cancel_reason) == ("todo", True, None)
    Issue.objects.filter(pk=issue.pk).update(status="done")
    r = hooks.github(c, "issues", payload("github", "issues-closed"))
    assert r.json()["outcome"] == "ignored" and _synced(c).status == "done"


def test_closed_upstream_while_an_agent_holds_it_ends_the_claim(world):
    c = hooks.connect(world)
    hooks.github(c, "issues", payload("github", "issues-opened"))
    issue = _synced(c)
    Issue.objects.filter(pk=issue.pk).update(awaiting_triage=False)
    claim = leases.next_issue(actor=world.a)
    assert claim["issue"]["identifier"] == issue.identifier
    hooks.github(c, "issues", payload("github", "issues-closed"))
    issue = _synced(c)
    assert (issue.status, issue.lease_claim_id) == ("canceled", None)


def test_comments_arrive_from_a_placeholder_named_after_the_author(world):
    c = hooks.connect(world)
    hooks.github(c, "issues", payload("github", "issues-opened"))
    hooks.github(c, "issue_comment", payload("github", "issue_comment-created"))
    hooks.github(c, "issue_comment", payload("github", "issue_comment-created"))  # a second comment by the same person
    comments = list(Comment.objects.filter(issue=_synced(c)).select_related("author").order_by("created_at"))
    assert [(x.body, x.author.get_full_name(), x.runtime) for x in comments] == [("Me too", "hubot (GitHub)", "github")] * 2
    placeholders = Membership.objects.filter(org=world.org, status="placeholder")
    assert sorted(m.user.first_name for m in placeholders) == ["hubot (GitHub)", "octocat (GitHub)"]


def test_a_delivery_for_another_repository_is_ignored(world):
    c = hooks.connect(world, repo="octocat/Other")
    before = snapshot()
    r = hooks.github(c, "issues", payload("github", "issues-opened"))
    assert r.status_code == 202 and r.json()["outcome"] == "ignored"
    assert snapshot() == before


def test_body_over_the_cap_is_413_before_anything(world, settings):
    settings.RETASC_HOOK_MAX_BODY_BYTES = 2048
    c = hooks.connect(world)
    data = payload("github", "issues-opened")
    data["issue"]["body"] = "x" * 5000
    r = hooks.github(c, "issues", data)
    assert (r.status_code, r.json()["code"]) == (413, "TOO_LARGE")
    assert Delivery.objects.count() == 0 and Issue.objects.filter(org=world.org).count() == 0


def test_pr_sync_marks_named_issues_done_only_when_merged_and_opted_in(world):
    off = hooks.connect(world, repo="octocat/Hello-World")
    on = hooks.connect(world, repo="octocat/Hello-World", pr_sync=True)
    first, second, third = new_issue(world.a, "One"), new_issue(world.a, "Two"), new_issue(world.a, "Three")
    merged = payload("github", "pull_request-closed")
    merged["pull_request"]["body"] = f"Fixes {first.identifier}, and tidies up."
    merged["pull_request"]["head"]["ref"] = f"{second.identifier.lower()}/parser-fix"

    r = hooks.github(off, "pull_request", merged)
    assert r.json()["outcome"] == "ignored" and Issue.objects.get(pk=first.pk).status == "todo"

    unmerged = payload("github", "pull_request-closed")
    unmerged["pull_request"].update(merged=False, merged_at=None, body=f"Fixes {third.identifier}")
    assert hooks.github(on, "pull_request", unmerged).json()["outcome"] == "ignored"
    assert Issue.objects.get(pk=third.pk).status == "todo"

    r = hooks.github(on, "pull_request", merged)
    assert r.json()["outcome"] == "applied"
    assert [Issue.objects.get(pk=i.pk).status for i in (first, second, third)] == ["done", "done", "todo"]
    verbs = set(first.activity.values_list("verb", flat=True))
    assert "finished" in verbs  # a receipt, by the connector (runtime github)
    assert first.activity.get(verb="finished").runtime == "github"


def test_a_connector_of_one_org_never_touches_another(world):
    theirs = new_issue(world.x, "Globex work")
    c = hooks.connect(world, pr_sync=True)
    merged = payload("github", "pull_request-closed")
    merged["pull_request"]["body"] = f"Fixes {theirs.identifier}"
    merged["pull_request"]["head"]["ref"] = f"{theirs.identifier.lower()}/x"
    before = Issue.objects.filter(org=world.other_org).values_list("pk", "status", "updated_at")
    before = list(before)
    r = hooks.github(c, "pull_request", merged)
    assert r.status_code == 202 and r.json()["outcome"] == "ignored"
    assert list(Issue.objects.filter(org=world.other_org).values_list("pk", "status", "updated_at")) == before
    # Org B's connector with org A's secret is refused; org A's issues land in org A only.
    theirs_connector = hooks.connect(world, org=world.other_org)
    assert hooks.github({**theirs_connector, "secret": c["secret"]}, "ping", payload("github", "ping")).status_code == 401
    hooks.github(c, "issues", payload("github", "issues-opened"))
    assert Issue.objects.filter(org=world.other_org).count() == 1
    assert _synced(c).org_id == world.org.pk
