"""The owner's billing page (SPEC §11, §12): balance and spend, the charts, the ledger with
filters, pages and a streamed CSV, the cap form, top-ups, and the banner when billing blocks."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import override_settings

from apps.billing import pricing
from apps.billing.models import LedgerEntry
from apps.billing.services import credit_grant
from apps.issues.models import Activity
from apps.issues.services import label_save
from apps.orgs.models import Org
from tests.conftest import make_agent
from tests.fakes.stripe import SECRET_KEY, FakeStripe


@pytest.fixture(autouse=True)
def fresh_prices():
    pricing.invalidate()
    yield
    pricing.invalidate()


def test_owner_sees_balance_spend_days_covered_and_both_charts(dash):
    org = Org.objects.get(pk=dash.w.org.pk)
    page = dash.owner.get("/org/billing/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'id="balance">${org.balance_micros / 1_000_000:,.2f}<' in html
    assert f'id="month-spend">${org.spend_month_micros / 1_000_000:,.2f}<' in html
    assert 'id="days-covered">' in html and "days covered at" in html
    assert '<svg class="chart" id="spend-chart"' in html and '<svg class="chart" id="runtime-chart"' in html
    # The fixture's agents charged today: a bar for today, per runtime.
    assert 'data-runtime="claude-code"' in html
    assert "Card top-ups are not configured" in html and "Grant credit" in html  # no Stripe keys here


def test_members_and_outsiders_cannot_see_billing(dash):
    assert dash.member.get("/org/billing/").status_code == 403
    assert dash.member.get("/org/billing/ledger.csv").status_code == 403
    assert "/org/billing/" not in dash.member.get("/org/members/").content.decode()  # no tab
    assert "/org/billing/" in dash.owner.get("/org/members/").content.decode()
    assert dash.anon.get("/org/billing/").status_code == 302
    # The outsider sees only their own org's ledger.
    html = dash.outsider.get("/org/billing/").content.decode()
    assert dash.w.owner_agent.actor.key.prefix not in html


def test_ledger_filters_by_key_runtime_and_tier_and_pages_back(dash):
    w = dash.w
    for i in range(7):
        label_save(actor=w.b, name=f"codex-label-{i}")  # bookkeeping, by the codex key
    codex = w.b.key.prefix

    by_key = dash.owner.get(f"/org/billing/?key={codex}").content.decode()
    rows = [r for r in by_key.split('data-entry="')[1:]]
    assert len(rows) == LedgerEntry.objects.filter(org_id=w.org.pk, key__prefix=codex).count() >= 7
    assert all(f"{codex}…" in r.split("</tr>")[0] for r in rows)

    by_runtime = dash.owner.get("/org/billing/?runtime=claude-code").content.decode()
    assert codex not in by_runtime.split('id="ledger-table"')[1]

    credit = dash.owner.get("/org/billing/?tier=credit").content.decode().split('id="ledger-table"')[1]
    assert 'data-action="credit"' in credit and 'data-action="save_label"' not in credit

    bad = dash.owner.get("/org/billing/?tier=gold")
    assert bad.status_code == 400 and "INVALID_ARGUMENT" in bad.content.decode()


def test_ledger_pages_by_cursor_without_gaps_or_repeats(dash, settings):
    w = dash.w
    for i in range(60):
        label_save(actor=w.b, name=f"l-{i}")
    all_ids = list(LedgerEntry.objects.filter(org_id=w.org.pk).order_by("-pk").values_list("pk", flat=True))
    seen, url = [], "/org/billing/"
    while url:
        html = dash.owner.get(url).content.decode()
        seen += [int(part.split('"')[0]) for part in html.split('data-entry="')[1:]]
        older = html.split('id="ledger-older"')[0].rsplit('href="', 1)[-1].split('"')[0] if 'id="ledger-older"' in html else None
        url = "/org/billing/" + older.replace("&amp;", "&") if older else None
    assert seen == all_ids and len(all_ids) > 50


def test_csv_download_streams_the_filtered_ledger(dash):
    w = dash.w
    label_save(actor=w.b, name="csv-me")
    response = dash.owner.get("/org/billing/ledger.csv?tier=bookkeeping")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith(f'attachment; filename="retasc-ledger-{w.org.slug}-')
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["at", "action", "tier", "amount_usd", "balance_after_usd", "key", "runtime", "principal", "note"]
    expected = LedgerEntry.objects.filter(org_id=w.org.pk, tier="bookkeeping").count()
    assert len(rows) - 1 == expected >= 1
    assert {r[2] for r in rows[1:]} == {"bookkeeping"}
    assert rows[1][1:4] == ["save_label", "bookkeeping", "-0.003000"]
    assert rows[1][5:7] == [w.b.key.prefix, "codex"]


def test_csv_quotes_text_a_spreadsheet_would_run(dash):
    for note in ('=HYPERLINK("http://x")', "@SUM(1)", "+1", "-2"):
        credit_grant(org=dash.w.org, amount_micros=1_000_000, note=note)
    body = b"".join(dash.owner.get("/org/billing/ledger.csv?tier=credit").streaming_content).decode()
    notes = [r[8] for r in csv.reader(io.StringIO(body))][1:5]
    assert notes == ["'-2", "'+1", "'@SUM(1)", '\'=HYPERLINK("http://x")']


def test_cap_form_sets_and_clears_with_a_receipt_each(dash):
    w = dash.w
    seq = Org.objects.get(pk=w.org.pk).activity_seq

    set_cap = dash.owner.post("/org/billing/cap/", {"cap": "50"})
    assert set_cap.status_code == 302
    assert Org.objects.get(pk=w.org.pk).monthly_cap_micros == 50_000_000
    assert "Monthly cap set to $50.00." in dash.owner.get("/org/billing/").content.decode()

    dash.owner.post("/org/billing/cap/", {"clear": "1"})
    assert Org.objects.get(pk=w.org.pk).monthly_cap_micros is None
    receipts = list(Activity.objects.filter(org_id=w.org.pk, seq__gt=seq).values_list("verb", "principal_id", "runtime"))
    assert receipts == [("billing_cap_set", w.owner.pk, "dash")] * 2
    changes = [a.changes for a in Activity.objects.filter(org_id=w.org.pk, seq__gt=seq).order_by("seq")]
    assert changes == [{"monthlyCapMicros": [None, 50_000_000]}, {"monthlyCapMicros": [50_000_000, None]}]


@pytest.mark.parametrize("value", ["fifty", "-5", "1e400", "0.0000001", "NaN", ""])
def test_a_bad_cap_is_refused_and_changes_nothing(dash, value):
    before = Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=dash.w.org.pk)
    response = dash.owner.post("/org/billing/cap/", {"cap": value})
    assert response.status_code == 400
    assert "INVALID_ARGUMENT" in response.content.decode()
    assert Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=dash.w.org.pk) == before


def test_members_cannot_set_the_cap(dash):
    before = Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=dash.w.org.pk)
    assert dash.member.post("/org/billing/cap/", {"cap": "1"}).status_code == 403
    assert Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=dash.w.org.pk) == before


def test_top_up_buttons_send_the_owner_to_stripe_checkout(dash, settings):
    fake = FakeStripe().start()
    try:
        settings.RETASC_STRIPE_SECRET_KEY = SECRET_KEY
        settings.RETASC_STRIPE_API_URL = fake.url
        html = dash.owner.get("/org/billing/").content.decode()
        assert all(f'name="amount" value="{n}"' in html for n in (10, 25, 50, 100))
        response = dash.owner.post("/org/billing/topup/", {"amount": "50"})
        assert (response.status_code, response["Location"]) == (302, f"{fake.url}/c/pay/cs_test_0001")
        assert fake.sessions["cs_test_0001"]["amount_total"] == 5000
        assert fake.sessions["cs_test_0001"]["client_reference_id"] == dash.w.org.slug

        refused = dash.owner.post("/org/billing/topup/", {"amount": "7"})
        assert refused.status_code == 400 and len(fake.sessions) == 1
        assert dash.member.post("/org/billing/topup/", {"amount": "10"}).status_code == 403
        assert len(fake.sessions) == 1
    finally:
        fake.stop()


@override_settings(RETASC_BILLING_ENFORCE=True)
def test_owners_see_a_banner_when_billing_blocks_and_members_do_not(dash):
    w = dash.w
    assert 'id="billing-banner"' not in dash.owner.get("/queue/").content.decode()

    Org.objects.filter(pk=w.org.pk).update(balance_micros=0)
    owner_page = dash.owner.get("/queue/").content.decode()
    assert 'id="billing-banner"' in owner_page and "BILLING_INACTIVE" in owner_page
    assert "Add credit to the org" in owner_page and 'href="/org/billing/"' in owner_page
    assert 'id="billing-banner"' not in dash.member.get("/queue/").content.decode()

    Org.objects.filter(pk=w.org.pk).update(balance_micros=50_000_000, monthly_cap_micros=0)
    capped = dash.owner.get("/queue/").content.decode()
    assert "MONTHLY_CAP_REACHED" in capped and "Raise or clear the monthly cap" in capped


def test_no_banner_while_enforcement_is_off(dash):
    Org.objects.filter(pk=dash.w.org.pk).update(balance_micros=0)
    assert 'id="billing-banner"' not in dash.owner.get("/queue/").content.decode()


def test_charts_split_spend_by_runtime(dash):
    w = dash.w
    gemini = make_agent(w.org, w.owner, w.project, runtime="gemini").actor
    label_save(actor=gemini, name="from-gemini")
    html = dash.owner.get("/org/billing/").content.decode()
    assert 'data-runtime="gemini"' in html.split('id="runtime-chart"')[1].split("</svg>")[0]
