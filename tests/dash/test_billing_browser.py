"""The billing page in a real browser (Playwright driving Debian's Chromium) against a
live Daphne: the numbers, the chart drawn, the cap form set and cleared, the ledger filter."""

from __future__ import annotations

import pytest

from tests.dash.live import browser_marks, chromium, expect, signed_in_page, start

pytestmark = browser_marks()


@pytest.fixture
def page(tworld, tmp_path):
    server = start(tmp_path)
    try:
        with chromium() as browser:
            yield signed_in_page(browser, server, tworld.owner, first_page="/org/billing/")
    finally:
        server.stop()


def test_billing_page_chart_and_cap_form(tworld, page):
    from apps.issues.services import label_save
    from apps.orgs.models import Org

    for name in ("a", "b", "c"):
        label_save(actor=tworld.a, name=name)
    label_save(actor=tworld.b, name="d")
    balance = Org.objects.get(pk=tworld.org.pk).balance_micros

    page.goto("/org/billing/")
    expect(page.locator("#balance")).to_have_text(f"${balance / 1_000_000:,.2f}")
    # The chart is drawn: today's stacked bar has a segment per runtime, with a title.
    chart = page.locator("#spend-chart")
    expect(chart).to_be_visible()
    assert chart.bounding_box()["width"] > 300
    expect(chart.locator("rect.bar[data-runtime='claude-code']")).to_have_count(1)
    expect(chart.locator("rect.bar[data-runtime='codex']")).to_have_count(1)
    expect(page.locator("#runtime-chart rect.bar")).to_have_count(2)

    # The cap form: set $50, then clear it; each is a receipt.
    page.fill("#cap-form input[name=cap]", "50")
    page.click("#cap-form button[name=set]")
    expect(page.locator(".alert.success")).to_contain_text("Monthly cap set to $50.00.")
    expect(page.locator("#cap-value")).to_have_text("$50.00")
    assert Org.objects.get(pk=tworld.org.pk).monthly_cap_micros == 50_000_000
    page.click("#cap-clear")
    expect(page.locator(".alert.success")).to_contain_text("Monthly cap cleared.")
    assert Org.objects.get(pk=tworld.org.pk).monthly_cap_micros is None

    # A bad cap is one clear sentence, and nothing changed.
    page.fill("#cap-form input[name=cap]", "lots")
    page.click("#cap-form button[name=set]")
    expect(page.locator("#error")).to_contain_text("INVALID_ARGUMENT")
    assert Org.objects.get(pk=tworld.org.pk).monthly_cap_micros is None

    # The ledger filter by runtime.
    page.goto("/org/billing/")
    page.select_option("#ledger-filter select[name=runtime]", "codex")
    page.click("#ledger-filter button[type=submit]")
    expect(page.locator("#ledger-table tbody tr")).to_have_count(1)
    expect(page.locator("#ledger-table tbody tr")).to_contain_text("save_label")

    # On a phone: nothing on the billing page itself runs past the screen (the ledger table
    # and the org tabs scroll inside their own boxes). (The shared top bar is another matter.)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/org/billing/")
    wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => !e.parentElement.closest('.table-scroll, .tabs'))"
        ".filter(e => e.getBoundingClientRect().right > 391).map(e => e.tagName + '#' + e.id + '.' + e.className)"
    )
    assert wide == []
