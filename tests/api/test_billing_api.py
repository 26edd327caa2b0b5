"""The billing endpoints behind the Dash page and `retasc billing` (SPEC §11)."""

from __future__ import annotations

import csv
import io

import pytest

from apps.billing.models import LedgerEntry
from apps.issues.models import Activity
from apps.orgs.models import Org
from tests.api.conftest import client
from tests.fakes.stripe import SECRET_KEY, FakeStripe


def cap_state(org):
    return Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=org.pk)


def test_owner_sets_and_clears_the_cap(world, owner):
    seq = Org.objects.get(pk=world.org.pk).activity_seq
    r = owner.put("/api/v1/billing/cap", {"capMicros": 50_000_000}, format="json")
    assert (r.status_code, r.json()) == (200, {"monthlyCapMicros": 50_000_000})
    assert owner.get("/api/v1/billing").json()["monthlyCapMicros"] == 50_000_000
    r = owner.put("/api/v1/billing/cap", {"capMicros": None}, format="json")
    assert (r.status_code, r.json()) == (200, {"monthlyCapMicros": None})
    verbs = list(Activity.objects.filter(org_id=world.org.pk, seq__gt=seq).values_list("verb", "key_id"))
    assert verbs == [("billing_cap_set", world.a.key_id)] * 2


@pytest.mark.parametrize(
    "body, code, field",
    [
        ({"capMicros": "50"}, "INVALID_ARGUMENT", "capMicros"),
        ({"capMicros": -1}, "INVALID_ARGUMENT", "capMicros"),
        ({"capMicros": 10**14}, "INVALID_ARGUMENT", "capMicros"),
        ({}, "INVALID_ARGUMENT", "capMicros"),
        ({"capMicros": 1, "extra": 1}, "INVALID", "extra"),
        ([1], "INVALID_ARGUMENT", "body"),
    ],
)
def test_bad_caps_are_refused_and_change_nothing(world, owner, body, code, field):
    before = cap_state(world.org)
    r = owner.put("/api/v1/billing/cap", body, format="json")
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (400, code, field)
    assert cap_state(world.org) == before


def test_members_cannot_set_the_cap_or_read_the_ledger(world, member):
    before = cap_state(world.org)
    assert member.put("/api/v1/billing/cap", {"capMicros": 1}, format="json").json()["code"] == "FORBIDDEN"
    assert cap_state(world.org) == before
    assert member.get("/api/v1/billing/ledger").status_code == 403
    assert member.get("/api/v1/billing/ledger.csv").status_code == 403
    assert client().get("/api/v1/billing/ledger").status_code == 401


def test_ledger_pages_filters_and_stays_in_the_org(world, owner, outsider):
    for i in range(5):
        owner.post("/api/v1/labels", {"name": f"l{i}"}, format="json")
    first = owner.get("/api/v1/billing/ledger", {"limit": 3}).json()
    assert len(first["entries"]) == 3 and first["nextCursor"] == str(first["entries"][-1]["id"])
    second = owner.get("/api/v1/billing/ledger", {"limit": 3, "cursor": first["nextCursor"]}).json()
    assert max(e["id"] for e in second["entries"]) < min(e["id"] for e in first["entries"])
    labels = owner.get("/api/v1/billing/ledger", {"tier": "bookkeeping"}).json()["entries"]
    assert [e["action"] for e in labels] == ["save_label"] * 5
    assert {e["key"] for e in labels} == {world.a.key.prefix} and {e["runtime"] for e in labels} == {"claude-code"}
    credits = owner.get("/api/v1/billing/ledger", {"tier": "credit"}).json()["entries"]
    assert [e["note"] for e in credits] == ["new org credit"]
    expected = set(LedgerEntry.objects.filter(org_id=world.other_org.pk).values_list("pk", flat=True))
    theirs = {e["id"] for e in outsider.get("/api/v1/billing/ledger", {"limit": 200}).json()["entries"]}
    assert theirs == expected  # (the read itself is charged after it: not in its own answer)
    assert owner.get("/api/v1/billing/ledger", {"cursor": "x"}).json()["field"] == "cursor"
    assert owner.get("/api/v1/billing/ledger", {"limit": "0"}).json()["field"] == "limit"


def test_ledger_csv_streams(world, owner):
    r = owner.get("/api/v1/billing/ledger.csv", {"runtime": "claude-code"})
    assert r.status_code == 200 and r.streaming
    rows = list(csv.reader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert rows[0][0] == "at" and all(row[6] == "claude-code" for row in rows[1:])


def test_top_up_answers_the_checkout_url(world, owner, member, settings):
    fake = FakeStripe().start()
    try:
        settings.RETASC_STRIPE_SECRET_KEY = SECRET_KEY
        settings.RETASC_STRIPE_API_URL = fake.url
        r = owner.post("/api/v1/billing/topups", {"amount": 100}, format="json")
        assert (r.status_code, r.json()) == (201, {"sessionId": "cs_test_0001", "url": f"{fake.url}/c/pay/cs_test_0001"})
        assert owner.post("/api/v1/billing/topups", {"amount": 3}, format="json").status_code == 400
        assert member.post("/api/v1/billing/topups", {"amount": 10}, format="json").status_code == 403
        assert len(fake.sessions) == 1
    finally:
        fake.stop()


def test_billing_refusals_carry_tell_human(world, owner, settings):
    settings.RETASC_BILLING_ENFORCE = True
    Org.objects.filter(pk=world.org.pk).update(balance_micros=0)
    r = owner.post("/api/v1/work/next")
    assert r.status_code == 402
    assert r.json()["code"] == "BILLING_INACTIVE" and "Billing" in r.json()["tellHuman"]
    Org.objects.filter(pk=world.org.pk).update(balance_micros=10**9, monthly_cap_micros=0)
    r = owner.post("/api/v1/work/next")
    assert (r.status_code, r.json()["code"]) == (402, "MONTHLY_CAP_REACHED") and "cap" in r.json()["tellHuman"]
