"""The Connectors page (owners create and revoke; the secret shown once; the delivery
log and writeback failures), triage accept / reject buttons, and the placeholder mark
on the members page. Django's test client; the browser journey is in test_browser_connectors."""

from __future__ import annotations

import re

from django.test import Client

from apps.intake.models import Connector, WritebackJob
from apps.intake.writeback import writeback_run
from apps.issues.models import Issue
from apps.orgs.services import placeholder_get_or_create
from tests.conftest import new_issue, snapshot
from tests.intake import hooks
from tests.intake.hooks import payload


def signed_in(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_owner_creates_a_connector_and_sees_the_secret_once(world):
    owner = signed_in(world.owner)
    r = owner.post("/org/connectors/new/", {"provider": "github", "repo": "octocat/Hello-World", "project": "ACME"})
    assert r.status_code == 201 and r["Cache-Control"] == "no-store"
    row = Connector.objects.get()
    html = r.content.decode()
    assert re.search(r'<pre id="new-secret">([^<]+)</pre>', html).group(1) == row.secret
    assert f"/hooks/github/{row.pk}" in html
    page = owner.get("/org/connectors/").content.decode()
    assert "octocat/Hello-World" in page and row.secret not in page  # shown once


def test_members_read_but_cannot_create_or_revoke(world):
    c = hooks.connect(world)
    member = signed_in(world.member)
    page = member.get("/org/connectors/")
    assert page.status_code == 200 and b"connector-create" not in page.content and b"octocat/Hello-World" in page.content
    before = Connector.objects.count()
    r = member.post("/org/connectors/new/", {"provider": "github", "repo": "a/b", "project": "ACME"})
    assert r.status_code == 403 and Connector.objects.count() == before
    r = member.post(f"/org/connectors/{c['connectorId']}/revoke/")
    assert r.status_code == 403 and Connector.objects.get(pk=c["connectorId"]).revoked_at is None
    outsider = signed_in(world.outsider)
    assert b"octocat/Hello-World" not in outsider.get("/org/connectors/").content


def test_the_delivery_log_and_a_writeback_failure_show(world):
    c = hooks.connect(world, api_url="http://127.0.0.1:9", token="t")  # nothing listens on port 9
    hooks.github(c, "ping", payload("github", "ping"), delivery="ping-1")
    hooks.github(c, "issues", payload("github", "issues-opened"), delivery="open-1")
    hooks.github(c, "issues", payload("github", "issues-opened"), signature="sha256=bad")
    owner = signed_in(world.owner)
    issue = Issue.objects.get(source_link__connector_id=c["connectorId"])
    owner.post(f"/issues/{issue.identifier}/triage/", {"decision": "reject", "reason": "not ours"})
    writeback_run()
    page = owner.get("/org/connectors/").content.decode()
    assert 'data-delivery="ping-1"' in page and 'data-delivery="open-1"' in page
    assert "created from #1347, awaiting triage" in page
    assert "writeback failing" in page and "could not be reached" in page
    assert WritebackJob.objects.get().reason == "not_planned"
    r = owner.post(f"/org/connectors/{c['connectorId']}/revoke/")
    assert r.status_code == 302 and Connector.objects.get().revoked_at is not None


def test_triage_buttons_accept_and_reject_with_a_reason(world):
    owner = signed_in(world.owner)
    a = new_issue(world.a, "Outside one", awaiting_triage=True)
    b = new_issue(world.a, "Outside two", awaiting_triage=True)
    page = owner.get(f"/issues/{a.identifier}/").content
    assert b'id="triage-accept"' in page and b'id="triage-reject"' in page
    before = snapshot()
    r = owner.post(f"/issues/{b.identifier}/triage/", {"decision": "reject", "reason": ""})
    assert r.status_code == 400 and snapshot() == before
    owner.post(f"/issues/{a.identifier}/triage/", {"decision": "accept"})
    owner.post(f"/issues/{b.identifier}/triage/", {"decision": "reject", "reason": "spam"})
    a, b = Issue.objects.get(pk=a.pk), Issue.objects.get(pk=b.pk)
    assert (a.awaiting_triage, a.status) == (False, "todo")
    assert (b.awaiting_triage, b.status, b.cancel_reason) == (False, "canceled", "spam")
    assert a.activity.filter(verb="triage_accepted").count() == 1 and b.activity.filter(verb="triage_rejected").count() == 1


def test_members_page_marks_placeholders_without_actions(world):
    placeholder_get_or_create(org=world.org, provider="github", login="octocat")
    page = signed_in(world.owner).get("/org/members/").content.decode()
    row = re.search(r'<tr data-member="octocat[^"]*".*?</tr>', page, re.S).group(0)
    assert "placeholder-mark" in row and "Suspend" not in row and "Retire" not in row
