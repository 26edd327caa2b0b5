"""The Dash's rough edges in a real browser (Playwright driving Debian's Chromium) against a
live Daphne: styled 404 and 500 pages for unknown URLs, the favicon, Markdown task lists
as read-only checkboxes, and the org settings form (owners save it; a member cannot).

Skipped, with the reason, when /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import new_issue
from tests.dash.live import browser_marks, expect, signed_in_page, start

pytestmark = browser_marks()


@pytest.fixture
def server(transactional_db, tmp_path):
    # DEBUG off and one failing URL (tests.dash.boom_urls): the pages production shows.
    srv = start(tmp_path, DJANGO_SETTINGS_MODULE="tests.dash.settings_boom")
    yield srv
    srv.stop()


def _styled(page) -> dict:
    """What makes a page a Dash page rather than raw text: the stylesheet applied."""
    return page.evaluate(
        """() => ({
            sheets: [...document.styleSheets].map(s => s.href || '').filter(h => h.includes('dash.css')).length,
            font: getComputedStyle(document.body).fontFamily,
            icon: document.querySelector('link[rel=icon]')?.href || '',
        })"""
    )


def test_unknown_urls_are_styled_pages_and_failures_hide_their_details(tworld, server, browser):
    page = signed_in_page(browser, server, tworld.owner)
    for url in ("/nope/", "/org/nope/really", "/issues/ACME-1/nope"):
        answer = page.goto(url)
        assert answer.status == 404 and answer.headers["content-type"].startswith("text/html"), url
        expect(page.locator("#not-found h1")).to_have_text("Not found")
        styled = _styled(page)
        assert styled["sheets"] == 1 and "favicon.svg" in styled["icon"] and "serif" not in styled["font"].split(",")[0]
        page.locator("#not-found a").click()
        expect(page).to_have_url(re.compile(r"/queue/$"))
    page.context.close()

    anonymous = browser.new_context(base_url=server.base, locale="en-US").new_page()
    answer = anonymous.goto("/boom/")
    assert answer.status == 500 and answer.headers["content-type"].startswith("text/html")
    expect(anonymous.locator("#server-error h1")).to_have_text("Something went wrong")
    assert "secret detail" not in anonymous.content() and "Traceback" not in anonymous.content()
    assert _styled(anonymous)["sheets"] == 1
    answer = anonymous.goto("/nope/")
    assert answer.status == 404 and anonymous.locator("#not-found").is_visible()
    # machines still get JSON from the same server
    api = anonymous.request.get("/api/v1/nope", headers={"Accept": "application/json"})
    assert api.status == 404 and api.json()["code"] == "NOT_FOUND"
    anonymous.context.close()


def test_the_favicon_is_served_and_shown(tworld, server, browser):
    page = signed_in_page(browser, server, tworld.owner)
    page.goto("/queue/")
    href = page.locator("link[rel=icon]").get_attribute("href")
    icon = page.request.get(href)
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert b"<svg" in icon.body()
    legacy = page.request.get("/favicon.ico")  # browsers that ask the root (redirect followed)
    assert legacy.status == 200 and legacy.url.endswith(href) and legacy.body() == icon.body()
    # the browser can draw it
    drawn = page.evaluate(
        """async (href) => { const img = new Image(); img.src = href; await img.decode();
                              return [img.naturalWidth, img.naturalHeight]; }""",
        href,
    )
    assert drawn[0] > 0 and drawn[1] > 0
    page.context.close()


def test_task_lists_are_read_only_checkboxes(tworld, server, browser):
    from apps.issues.models import Issue

    issue = new_issue(tworld.a, "Ship it", body="Steps:\n\n- [ ] write it\n- [x] test it\n- plain point\n")
    page = signed_in_page(browser, server, tworld.owner)
    page.goto(f"/issues/{issue.identifier}/")
    boxes = page.locator("li.task input[type=checkbox]")
    expect(boxes).to_have_count(2)
    expect(boxes.nth(0)).not_to_be_checked()
    expect(boxes.nth(1)).to_be_checked()
    expect(boxes.nth(0)).to_be_disabled()
    expect(boxes.nth(1)).to_be_disabled()
    expect(page.locator("li.task").nth(0)).to_have_text("write it")
    expect(page.locator("li", has_text="plain point").locator("input")).to_have_count(0)
    boxes.nth(0).click(force=True)  # a click changes nothing, on the page or on the server
    expect(boxes.nth(0)).not_to_be_checked()
    page.reload()
    expect(page.locator("li.task input[type=checkbox]").nth(0)).not_to_be_checked()
    assert Issue.objects.get(pk=issue.pk).body.startswith("Steps:\n\n- [ ] write it")
    page.context.close()


def test_owner_saves_org_settings_and_a_member_is_refused(tworld, server, browser):
    from apps.issues.models import Activity
    from apps.orgs.models import Org

    owner = signed_in_page(browser, server, tworld.owner)
    owner.goto("/org/settings/")
    form = owner.locator("#org-settings")
    form.locator("input[name=lease_ttl_seconds]").fill("600")
    form.locator("input[name=claim_cap]").fill("3")
    form.locator("input[name=timezone]").fill("Europe/Berlin")
    form.locator("button[type=submit]").click()
    expect(owner.locator(".alert.success")).to_contain_text("Saved the org's settings.")
    expect(owner.locator("#org-settings input[name=claim_cap]")).to_have_value("3")
    org = Org.objects.get(pk=tworld.org.pk)
    assert (org.lease_ttl_seconds, org.claim_cap, org.timezone) == (600, 3, "Europe/Berlin")

    # a bad time zone: the form says why and nothing changes
    receipts = Activity.objects.filter(org=tworld.org).count()
    owner.locator("#org-settings input[name=timezone]").fill("Mars/Olympus")
    owner.locator("#org-settings button[type=submit]").click()
    expect(owner.locator("#error")).to_contain_text("INVALID_ARGUMENT")
    org = Org.objects.get(pk=tworld.org.pk)
    assert org.timezone == "Europe/Berlin" and Activity.objects.filter(org=tworld.org).count() == receipts
    owner.context.close()

    member = signed_in_page(browser, server, tworld.member)
    member.goto("/org/settings/")
    expect(member.locator("main")).to_contain_text("Only an owner changes the org's settings.")
    expect(member.locator("#org-settings")).to_have_count(0)
    # posting anyway (the member's own session and CSRF token) is refused and changes nothing
    token = next(c["value"] for c in member.context.cookies() if c["name"] == "csrftoken")
    refused = member.request.post(
        "/org/settings/",
        form={"lease_ttl_seconds": "5", "claim_cap": "50", "timezone": "UTC", "csrfmiddlewaretoken": token},
        headers={"Referer": f"{server.base}/org/settings/"},
    )
    assert refused.status in (400, 403)
    org = Org.objects.get(pk=tworld.org.pk)
    assert (org.lease_ttl_seconds, org.claim_cap, org.timezone) == (600, 3, "Europe/Berlin")
    assert Activity.objects.filter(org=tworld.org).count() == receipts
    member.context.close()


def test_the_board_and_settings_speak_chinese(tworld, server, browser):
    new_issue(tworld.a, "看板上的事项", priority=1)
    page = signed_in_page(browser, server, tworld.owner)
    page.context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": server.base}])
    page.goto("/board/")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("#view-table")).to_have_text("表格")
    expect(page.locator("#view-board")).to_have_text("看板")
    expect(page.locator("#board")).to_contain_text("看板上的事项")
    page.goto("/queue/")
    page.keyboard.press("?")
    expect(page.get_by_text("键盘快捷键")).to_be_visible()
    page.goto("/org/settings/")
    expect(page.locator("#org-settings")).to_contain_text("租约时长（秒）")
    expect(page.locator("#org-settings")).to_contain_text("时区")
    page.goto("/nope/")
    expect(page.locator("#not-found")).to_contain_text("此地址没有页面。")
    page.context.close()
