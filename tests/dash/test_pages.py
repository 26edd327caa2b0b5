"""Every Dash page renders for a signed-in member, shows only its org, and escapes content."""

from __future__ import annotations

import pytest

from apps.leases import services as leases
from tests.conftest import new_issue

PAGES = ["/queue/", "/queue/live/", "/fleet/", "/fleet/live/", "/issues/new/", "/org/projects/", "/org/members/", "/org/keys/"]


@pytest.mark.parametrize("url", PAGES)
def test_page_renders_for_owner(dash, url):
    response = dash.owner.get(url)
    assert response.status_code == 200, response.content[:500]


def test_root_redirects_to_queue(dash):
    response = dash.owner.get("/")
    assert response.status_code == 302 and response["Location"] == "/queue/"


def test_queue_lists_own_org_only(dash):
    body = dash.owner.get("/queue/").content.decode()
    assert dash.issue_a.identifier in body and "Fix the login bug" in body
    assert "Globex secret plan" not in body


def test_queue_filters(dash):
    w = dash.w
    blocker = new_issue(w.a, "Blocker first", priority=4)
    new_issue(w.a, "Waits for blocker", blocked_by=[blocker.identifier], priority=1)
    leases.next_issue(actor=w.b)  # member's codex agent claims the blocker (inherits urgent)
    held = dash.owner.get("/queue/live/?state=held").content.decode()
    assert "Blocker first" in held and "Waits for blocker" not in held
    assert "codex" in held
    blocked = dash.owner.get("/queue/live/?state=blocked").content.decode()
    assert "Waits for blocker" in blocked and "Blocker first" not in blocked
    by_runtime = dash.owner.get("/queue/live/?runtime=codex").content.decode()
    assert "Blocker first" in by_runtime and "Fix the login bug" not in by_runtime
    urgent = dash.owner.get("/queue/live/?priority=1").content.decode()
    assert "Waits for blocker" in urgent and "Fix the login bug" not in urgent
    done = dash.owner.get("/queue/live/?status=done").content.decode()
    assert "Fix the login bug" not in done
    dated = dash.owner.get("/queue/live/?from=2000-01-01&to=2000-01-02").content.decode()
    assert "Fix the login bug" not in dated


def test_queue_count_agrees_with_the_rows(dash):
    from apps.issues.services import issue_update

    w = dash.w
    for n in range(5):
        new_issue(w.a, f"Open {n}")
    closed = new_issue(w.a, "Closed one")
    issue_update(actor=w.a, identifier=closed.identifier, status="canceled", cancel_reason="dup")
    page = dash.owner.get("/queue/").content.decode()  # default: open issues
    rows = page.count('<tr data-issue="')
    assert rows == 6 and "6 issues" in page  # five new and the fixture's, not seven
    assert "1 issue" in dash.owner.get("/queue/?status=canceled").content.decode()


def test_queue_search_box(dash):
    w = dash.w
    new_issue(w.a, "数据库连接失败", priority=1)
    new_issue(w.a, "Login timeout", priority=1)
    page = dash.owner.get("/queue/?q=login").content.decode()
    assert 'name="q" value="login"' in page
    found = dash.owner.get("/queue/live/?q=login").content.decode()
    # both login issues; the one matching more words would come first; other orgs never
    assert "Fix the login bug" in found and "Login timeout" in found and "数据库" not in found
    assert "Globex" not in dash.owner.get("/queue/live/?q=secret+plan").content.decode()
    assert "数据库连接失败" in dash.owner.get("/queue/live/?q=连接").content.decode()
    both = dash.owner.get("/queue/live/?q=login+bug").content.decode()
    assert both.index("Fix the login bug") < both.index("Login timeout")  # two words beat one
    combined = dash.owner.get("/queue/live/?q=login&priority=1").content.decode()
    assert "Login timeout" in combined and "Fix the login bug" not in combined
    assert dash.owner.get("/queue/live/?q=" + "x" * 300).status_code == 200


def test_issue_page_renders_sanitized_markdown(dash):
    issue = new_issue(dash.w.a, "XSS try", body="<script>alert(1)</script> [x](javascript:alert(2)) **bold**")
    body = dash.owner.get(f"/issues/{issue.identifier}/").content.decode()
    assert "<script>alert(1)" not in body
    assert 'href="javascript:' not in body
    assert "<strong>bold</strong>" in body
    assert "chain verified" in body


def test_other_orgs_issue_is_not_found(dash):
    response = dash.outsider.get(f"/issues/{dash.issue_a.identifier}/")
    assert response.status_code == 404
    assert b"Fix the login bug" not in response.content


def test_fleet_shows_live_claim_with_runtime(dash):
    leases.next_issue(actor=dash.w.b)
    body = dash.owner.get("/fleet/").content.decode()
    assert dash.issue_a.identifier in body
    assert dash.w.member.email in body and "codex" in body
    assert 'class="countdown"' in body


def test_first_sign_in_bootstraps_an_org(db, client):
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model

    from apps.orgs.models import Membership

    user = get_user_model().objects.create_user(username="new@example.com", email="new@example.com", password="x")
    EmailAddress.objects.create(user=user, email=user.email, verified=True, primary=True)
    client.force_login(user)
    assert client.get("/queue/").status_code == 200
    membership = Membership.objects.get(user=user)
    assert membership.role == "owner"
    assert membership.org.projects.count() == 1
