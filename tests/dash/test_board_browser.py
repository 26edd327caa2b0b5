"""The board, saved filters, bulk changes, keyboard shortcuts and narrow layouts in a real
browser (Playwright driving Debian's Chromium) against a live Daphne.

Skipped, with the reason, when /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import new_issue
from tests.dash.live import browser_marks, expect, mcp_call
from tests.dash.live import signed_in_page as open_signed_in

pytestmark = browser_marks()


@pytest.fixture
def signed_in_page(browser, server):
    """``signed_in_page(user, width=1400)``: a page whose session is that person's."""
    pages = []

    def make(user, width=1400, height=900):
        pages.append(open_signed_in(browser, server, user, width=width, height=height))
        return pages[-1]

    yield make
    for page in pages:
        page.context.close()


def test_the_board_is_live_and_switches_with_the_table_keeping_filters(tworld, server, signed_in_page):
    w = tworld
    one = new_issue(w.a, "Wire the payment webhook", priority=2, labels=["api"])
    new_issue(w.a, "A low chore", priority=4)
    page = signed_in_page(w.owner)
    page.goto("/board/?priority=2")
    todo = page.locator('#board .column[data-status="todo"]')
    doing = page.locator('#board .column[data-status="doing"]')
    card = page.locator(f'#board .bcard[data-issue="{one.identifier}"]')
    expect(todo.locator(".bcard")).to_have_count(1)  # the low chore is filtered out
    expect(todo.locator(f'[data-issue="{one.identifier}"]')).to_contain_text("high")
    expect(card).to_contain_text("api")
    expect(page.locator('#board details[data-column="done"]')).not_to_have_attribute("open", "")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")
    page.evaluate("window.__noReload = 7")

    # An agent claims it over MCP: the card moves to doing, with its holder and lease.
    claim = mcp_call(f"{server.base}/mcp", w.owner_agent.raw, "claim_issue", identifier=one.identifier)
    assert not claim["error"], claim
    expect(doing.locator(f'[data-issue="{one.identifier}"]')).to_be_visible(timeout=5_000)
    expect(todo.locator(".bcard")).to_have_count(0)
    expect(card.locator(".holder")).to_contain_text("claude-code")
    expect(card.locator(".countdown")).to_have_text(re.compile(r"^\d+:\d\d"))
    expect(page.locator('[data-column-count="doing"]')).to_have_text("1")
    assert page.evaluate("window.__noReload") == 7

    # The switch keeps the filters, both ways; b does the same from the keyboard.
    page.click("#view-table")
    expect(page).to_have_url(re.compile(r"/queue/\?.*priority=2"))
    expect(page.locator("#queue-table tbody tr[data-issue]")).to_have_count(1)
    page.keyboard.press("b")
    expect(page).to_have_url(re.compile(r"/board/\?.*priority=2"))
    expect(page.locator("#board .bcard")).to_have_count(1)


def test_a_member_saves_applies_and_deletes_a_filter_only_they_see(tworld, signed_in_page):
    from apps.orgs.models import SavedFilter

    w = tworld
    new_issue(w.a, "Urgent thing", priority=1)
    new_issue(w.a, "Other thing", priority=3)
    page = signed_in_page(w.member)
    page.goto("/queue/?priority=1")
    page.fill("#filter-save input[name=name]", "urgent only")
    page.click("#filter-save button[type=submit]")
    expect(page.locator(".alert.success")).to_contain_text("urgent only")
    link = page.locator('#saved-filters [data-filter="urgent only"] a')
    expect(link).to_be_visible()
    assert SavedFilter.objects.get().user_id == w.member.pk

    page.goto("/queue/")
    expect(page.locator("#queue-table tbody tr[data-issue]")).to_have_count(2)
    page.locator('#saved-filters [data-filter="urgent only"] a').click()
    expect(page).to_have_url(re.compile(r"/queue/\?.*priority=1"))
    expect(page.locator("#queue-table tbody tr[data-issue]")).to_have_count(1)

    owner = signed_in_page(w.owner)
    owner.goto("/queue/")
    expect(owner.locator("#saved-filters [data-filter]")).to_have_count(0)  # the owner does not see it

    page.locator('#saved-filters [data-filter="urgent only"] button').click()
    expect(page.locator("#saved-filters [data-filter]")).to_have_count(0)
    assert SavedFilter.objects.count() == 0


def test_bulk_change_of_selected_rows_reports_each_refusal(tworld, server, signed_in_page):
    from apps.issues.models import Activity, Issue

    w = tworld
    a = new_issue(w.a, "First to close", priority=3)
    b = new_issue(w.a, "Needs evidence", priority=3, acceptance=["tests pass"])
    c = new_issue(w.a, "Third to close", priority=3)
    untouched = new_issue(w.a, "Not selected", priority=3)
    page = signed_in_page(w.owner)
    page.goto("/queue/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")
    page.check(f'#queue-table tr[data-issue="{a.identifier}"] input[name=issue]')
    # x selects the row under the keyboard cursor.
    rows = [page.locator("#queue-table tbody tr[data-issue]").nth(n).get_attribute("data-issue") for n in range(4)]
    for _ in range(rows.index(b.identifier) + 1):
        page.keyboard.press("j")
    expect(page.locator(f'#queue-table tr[data-issue="{b.identifier}"]')).to_have_class(re.compile("cursor"))
    page.keyboard.press("x")
    page.check(f'#queue-table tr[data-issue="{c.identifier}"] input[name=issue]')
    expect(page.locator("#bulk-count")).to_have_text("3 selected")

    # A live refresh (an agent claims the unselected issue) keeps the selection.
    claim = mcp_call(f"{server.base}/mcp", w.owner_agent.raw, "claim_issue", identifier=untouched.identifier)
    assert not claim["error"], claim
    expect(page.locator(f'#queue-table tr[data-issue="{untouched.identifier}"]')).to_have_attribute(
        "data-state", "held", timeout=5_000
    )
    for issue in (a, b, c):
        expect(page.locator(f'#queue-table tr[data-issue="{issue.identifier}"] input[name=issue]')).to_be_checked()

    before = Activity.objects.count()
    page.select_option("#bulk-form select[name=status]", "done")
    page.fill("#bulk-form input[name=add_label]", "release-9")
    page.click("#bulk-form button[type=submit]")
    expect(page.locator(".alert.success")).to_contain_text(f"Changed 2 issues: {a.identifier}, {c.identifier}.")
    expect(page.locator(".alert.error")).to_contain_text(f"{b.identifier}: ACCEPTANCE_EVIDENCE_REQUIRED")
    statuses = dict(Issue.objects.filter(pk__in=[a.pk, b.pk, c.pk, untouched.pk]).values_list("number", "status"))
    assert statuses == {a.number: "done", b.number: "todo", c.number: "done", untouched.number: "doing"}
    assert list(Issue.objects.get(pk=a.pk).labels.values_list("name", flat=True)) == ["release-9"]
    assert not Issue.objects.get(pk=b.pk).labels.exists()  # a refused issue gets none of the change
    assert sorted(Activity.objects.order_by("pk")[before:].values_list("issue_id", flat=True)) == sorted([a.pk, c.pk])


def test_keyboard_shortcuts_and_help(tworld, signed_in_page):
    w = tworld
    first = new_issue(w.a, "First in line", priority=1)
    second = new_issue(w.a, "Second in line", priority=2)
    page = signed_in_page(w.owner)
    page.goto("/queue/")
    help_box = page.locator("#shortcuts-help")
    expect(help_box).to_be_hidden()
    page.keyboard.press("?")
    expect(help_box).to_be_visible()
    expect(help_box).to_contain_text("Keyboard shortcuts")
    page.keyboard.press("Escape")
    expect(help_box).to_be_hidden()

    page.keyboard.press("j")
    expect(page.locator(f'tr[data-issue="{first.identifier}"]')).to_have_class(re.compile("cursor"))
    page.keyboard.press("j")
    expect(page.locator(f'tr[data-issue="{second.identifier}"]')).to_have_class(re.compile("cursor"))
    page.keyboard.press("k")
    expect(page.locator(f'tr[data-issue="{first.identifier}"]')).to_have_class(re.compile("cursor"))

    page.keyboard.press("/")
    expect(page.locator("#queue-search")).to_be_focused()
    page.keyboard.type("jk")  # typed into the search box, not taken as shortcuts
    expect(page.locator("#queue-search")).to_have_value("jk")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/issues/{first.identifier}/$"))


def test_no_inline_scripts_or_handlers_on_the_queue_and_board(tworld, signed_in_page):
    new_issue(tworld.a, "Anything")
    page = signed_in_page(tworld.owner)
    for url in ("/queue/", "/board/"):
        page.goto(url)
        inline = page.evaluate(
            """() => [...document.querySelectorAll('script:not([src])')].filter(s => s.type !== 'application/json').length
                 + [...document.querySelectorAll('*')].filter(el => [...el.attributes].some(a => a.name.startsWith('on'))).length"""
        )
        assert inline == 0, url


NARROW_PAGES = [
    "/queue/",
    "/board/?status=all",
    "/issues/{issue}/",
    "/org/projects/",
    "/org/members/",
    "/org/keys/",
    "/org/settings/",
    "/fleet/",
    "/nope/",
]


def test_phone_width_has_no_sideways_scrolling(tworld, server, signed_in_page):
    from apps.issues.services import comment_create

    w = tworld
    issue = new_issue(
        w.a,
        "A rather long title that would push a narrow table wider than a phone screen if it could",
        body="```\n" + "x" * 300 + "\n```\n\n- [ ] a task\n- [x] done",
        labels=["frontend", "mobile"],
        acceptance=["it fits"],
        priority=1,
    )
    comment_create(actor=w.a, issue=issue.identifier, body="https://example.com/" + "a" * 120)
    mcp_call(f"{server.base}/mcp", w.owner_agent.raw, "claim_issue", identifier=issue.identifier)
    page = signed_in_page(w.owner, width=390, height=844)
    for url in NARROW_PAGES:
        page.goto(url.format(issue=issue.identifier))
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.scrollingElement.scrollWidth")
        wide = page.evaluate(
            """() => [...document.querySelectorAll('body *')].filter(el => el.getBoundingClientRect().right > 391)
                 .slice(0, 5).map(el => el.tagName + '.' + el.className + '#' + el.id)"""
        )
        assert width <= 390, (url, width, wide)
    page.goto("/board/")
    expect(page.locator(f'#board .bcard[data-issue="{issue.identifier}"]')).to_be_in_viewport()


def test_the_fleet_fits_1440(tworld, server, signed_in_page):
    from apps.orgs.services import agent_key_mint

    w = tworld
    for n in range(3):
        agent_key_mint(
            org=w.org, user=w.member, project=w.project, runtime="claude-code", label=f"a very long laptop label {n}" * 2
        )
    issue = new_issue(w.a, "Held for the fleet")
    mcp_call(f"{server.base}/mcp", w.owner_agent.raw, "claim_issue", identifier=issue.identifier)
    mcp_call(f"{server.base}/mcp", w.member_agent.raw, "whoami")
    page = signed_in_page(w.owner, width=1440)
    page.goto("/fleet/")
    expect(page.locator("#fleet-agents tbody tr")).not_to_have_count(0)
    fits = page.evaluate(
        """() => {
            const wrap = document.getElementById('fleet-agents-wrap'), table = document.getElementById('fleet-agents');
            return {doc: document.scrollingElement.scrollWidth, wrap: wrap.scrollWidth - wrap.clientWidth,
                    right: table.getBoundingClientRect().right, view: window.innerWidth};
        }"""
    )
    assert fits["doc"] <= 1440 and fits["wrap"] <= 0 and fits["right"] <= fits["view"], fits
