"""The Dash in a real browser (Playwright driving Debian's Chromium) against a live Daphne.

Journeys: sign up (first sign-in creates the person's org), create a project, mint a
key; an agent claims an issue over MCP with that key and the open queue, fleet and
issue pages show it without a reload; an owner invites a teammate who redeems the code
in a second browser context; the language switch sticks.

Skipped, with the reason, when /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.dash.live import browser_marks, expect, mcp_call

pytestmark = browser_marks()

PASSWORD = "correct-horse-battery-9"


@pytest.fixture
def page(browser, server):
    context = browser.new_context(base_url=server.base, viewport={"width": 1400, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def sign_up(page, email: str, next_url: str | None = None, server=None) -> None:
    """Sign up; with ``server``, also confirm the address (an account acts in an org only
    with a verified address) through the link the server mailed (printed on its console)."""
    page.goto("/accounts/signup/" + (f"?next={next_url}" if next_url else ""))
    page.fill("input[name=email]", email)
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("form button[type=submit]")
    if server is not None:
        confirm_email(page, server, email)


def confirm_email(page, server, email: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        log = server.log()
        mail = log[log.rfind(f"To: {email}") :] if f"To: {email}" in log else ""
        links = re.findall(r"https?://[^/\s]+(/accounts/confirm-email/[^\s]+/)", mail)
        if links:
            break
        assert time.monotonic() < deadline, f"no confirmation mail for {email}"
        time.sleep(0.1)
    page.goto(links[0])
    # (the page's form carries a freshly signed key of its own)
    page.locator('form[action^="/accounts/confirm-email/"]').get_by_role("button", name="Confirm").click()


def test_sign_up_project_key_and_a_live_claim(page, server, browser):
    from apps.orgs.models import Membership

    # Sign up: until the address is confirmed, no org (the page says how to verify) ...
    sign_up(page, "ada@example.com")
    page.goto("/queue/")
    expect(page.locator("#error")).to_contain_text("Verify your e-mail address ada@example.com")
    assert not Membership.objects.filter(user__email="ada@example.com").exists()
    # ... then the first sign-in lands on the queue of the person's own new org.
    confirm_email(page, server, "ada@example.com")
    expect(page).to_have_url(re.compile(r"/queue/$"))
    membership = Membership.objects.select_related("org").get(user__email="ada@example.com")
    assert membership.role == "owner" and membership.org.projects.count() == 1

    # Create a project.
    page.goto("/org/projects/")
    page.fill("#project-create input[name=prefix]", "WEB")
    page.fill("#project-create input[name=name]", "Website")
    page.click("#project-create button[type=submit]")
    expect(page.locator('#projects-table tr[data-prefix="WEB"]')).to_be_visible()

    # Mint a key for the project: shown once, with the agent configs.
    page.goto("/org/keys/")
    page.fill("#key-mint input[name=runtime]", "claude-code")
    page.select_option("#key-mint select[name=project]", "WEB")
    page.fill("#key-mint input[name=label]", "laptop")
    page.click("#key-mint button[type=submit]")
    raw_key = page.locator("#new-key-raw").inner_text().strip()
    assert raw_key.startswith("rtsc_")
    expect(page.locator('pre[data-config="Claude Code"]')).to_contain_text('"type": "http"')
    expect(page.locator('pre[data-config="Claude Code"]')).to_contain_text(f"{server.base}/mcp")

    # File an issue from the Dash.
    page.goto("/issues/new/?project=WEB")
    page.select_option("#f-project", "WEB")
    page.fill("#f-title", "Ship the login page")
    page.fill("input[name=no_dependency]", "first task")
    page.click("#issue-form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/issues/WEB-1/$"))

    # Keep the issue page open in a second tab; watch the queue in the first.
    issue_tab = page.context.new_page()
    issue_tab.goto("/issues/WEB-1/")
    page.goto("/queue/?project=WEB")
    row = page.locator('#queue-table tr[data-issue="WEB-1"]')
    expect(row).to_have_attribute("data-state", "ready")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")
    expect(issue_tab.locator("#live-state")).to_have_attribute("data-state", "on")
    page.evaluate("window.__noReload = 42")

    # An agent claims it over MCP with the minted key.
    claim = mcp_call(f"{server.base}/mcp", raw_key, "next_issue")
    assert not claim["error"], claim
    assert claim["issue"]["identifier"] == "WEB-1"

    # The open pages show the claim without a reload.
    expect(row).to_have_attribute("data-state", "held", timeout=5_000)
    expect(row).to_contain_text("claude-code")
    assert page.evaluate("window.__noReload") == 42
    expect(issue_tab.locator("#issue-claim")).to_contain_text("claude-code", timeout=5_000)
    expect(issue_tab.locator("#issue-status")).to_contain_text("doing")

    # The fleet page lists it, then sees the release live too.
    page.goto("/fleet/")
    expect(page.locator('#fleet-table tr[data-issue="WEB-1"]')).to_contain_text("ada@example.com")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")
    released = mcp_call(f"{server.base}/mcp", raw_key, "release_issue", identifier="WEB-1", claimToken=claim["claimToken"])
    assert not released["error"], released
    expect(page.locator('#fleet-table tr[data-issue="WEB-1"]')).to_have_count(0, timeout=5_000)


def test_invite_a_teammate_who_redeems_in_another_browser(page, server, browser):
    from apps.orgs.models import Membership

    sign_up(page, "owner@example.com", server=server)
    expect(page).to_have_url(re.compile(r"/queue/$"))
    owner_org = Membership.objects.get(user__email="owner@example.com").org

    page.goto("/org/invites/")
    page.click("#invite-create button[type=submit]")
    link = page.locator("#invite-link").inner_text().strip()
    assert "/invite/rtscinv_" in link

    teammate = browser.new_context(base_url=server.base, locale="en-US").new_page()
    teammate.goto(link)
    teammate.click("#invite-signup")
    teammate.fill("input[name=email]", "grace@example.com")
    teammate.fill("input[name=password1]", PASSWORD)
    teammate.fill("input[name=password2]", PASSWORD)
    teammate.click("form button[type=submit]")
    expect(teammate).to_have_url(re.compile(r"/invite/rtscinv_"))
    confirm_email(teammate, server, "grace@example.com")  # joining needs a verified address
    expect(teammate).to_have_url(re.compile(r"/invite/rtscinv_"))  # the invite waited
    teammate.click("#invite-accept button[type=submit]")
    expect(teammate).to_have_url(re.compile(r"/queue/$"))
    expect(teammate.locator(".alert.success")).to_contain_text(owner_org.name)

    memberships = list(Membership.objects.filter(user__email="grace@example.com"))
    assert [(m.org_id, m.role) for m in memberships] == [(owner_org.pk, "member")]  # no org of her own

    page.goto("/org/invites/")
    expect(page.locator("#invites-table tr[data-status=accepted]")).to_contain_text("grace@example.com")
    page.goto("/org/members/")
    expect(page.locator('#members-table tr[data-member="grace@example.com"]')).to_be_visible()
    teammate.context.close()


def test_language_switch_stays_on_the_page_and_is_remembered(page, server):
    sign_up(page, "lin@example.com", server=server)
    page.goto("/fleet/")
    page.select_option("#lang-select", "zh-hans")
    expect(page).to_have_url(re.compile(r"/fleet/$"))
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("nav.nav")).to_contain_text("队列")
    page.goto("/org/keys/")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("h2").first).to_contain_text("创建密钥")
    page.select_option("#lang-select", "en")
    expect(page).to_have_url(re.compile(r"/org/keys/$"))
    expect(page.locator("nav.nav")).to_contain_text("Queue")
