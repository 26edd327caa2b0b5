"""The admin's "Grant credit" and "Correct balance" actions, and the read-only balance."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from apps.billing.models import LedgerEntry
from apps.issues.models import Activity
from apps.orgs.models import Org


@pytest.fixture
def staff_client(world, client):
    staff = get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "pw-staff-1")
    client.force_login(staff)
    client.staff = staff
    return client


def _ledger(org):
    return list(LedgerEntry.objects.filter(org_id=org.pk).order_by("pk").values_list("action", "amount_micros", "note"))


def _act(client, action, orgs, **form):
    data = {"action": action, "_selected_action": [str(o.pk) for o in orgs], **form}
    return client.post("/admin/orgs/org/", data)


def test_the_balance_cannot_be_edited_on_the_org_page(world, staff_client):
    page = staff_client.get(f"/admin/orgs/org/{world.org.pk}/change/").content.decode()
    assert 'name="balance_micros"' not in page and 'name="monthly_cap_micros"' not in page
    assert 'name="name"' in page  # the form is there; only the money is read-only

    before = Org.objects.get(pk=world.org.pk).balance_micros
    staff_client.post(
        f"/admin/orgs/org/{world.org.pk}/change/",
        {
            "slug": world.org.slug,
            "name": world.org.name,
            "timezone": "UTC",
            "balance_micros": "999999999",
            "membership_set-TOTAL_FORMS": "0",
            "membership_set-INITIAL_FORMS": "0",
        },
    )
    assert Org.objects.get(pk=world.org.pk).balance_micros == before


def test_grant_credit_asks_for_amount_and_reason_then_writes_one_entry_per_org(world, staff_client):
    # Given: the action chosen on two orgs shows the form, and changes nothing yet.
    before = {o.pk: _ledger(o) for o in (world.org, world.other_org)}
    form = _act(staff_client, "grant_credit", [world.org, world.other_org])
    assert form.status_code == 200
    html = form.content.decode()
    assert "Grant credit" in html and world.org.slug in html and world.other_org.slug in html
    assert {o.pk: _ledger(o) for o in (world.org, world.other_org)} == before

    # When: staff fill in $12.50 and a reason.
    done = _act(staff_client, "grant_credit", [world.org, world.other_org], apply="1", amount="12.50", reason="outage goodwill")

    # Then: one entry each, naming the staff user, and a receipt each.
    assert done.status_code == 302
    for org in (world.org, world.other_org):
        assert _ledger(org) == before[org.pk] + [("credit", 12_500_000, "outage goodwill")]
        assert LedgerEntry.objects.filter(org_id=org.pk).latest("pk").principal_id == staff_client.staff.pk
        receipt = Activity.objects.filter(org_id=org.pk).latest("seq")
        assert (receipt.verb, receipt.principal_id) == ("credit_grant", staff_client.staff.pk)


def test_correct_balance_accepts_a_negative_amount_with_a_reason(world, staff_client):
    before = Org.objects.get(pk=world.org.pk).balance_micros
    _act(staff_client, "correct_balance", [world.org], apply="1", amount="-2.000001", reason="metering bug refund reversal")
    assert Org.objects.get(pk=world.org.pk).balance_micros == before - 2_000_001
    assert _ledger(world.org)[-1] == ("correction", -2_000_001, "metering bug refund reversal")


@pytest.mark.parametrize(
    "action, form",
    [
        ("grant_credit", {"amount": "-5", "reason": "negative grant"}),
        ("grant_credit", {"amount": "0", "reason": "zero"}),
        ("grant_credit", {"amount": "5", "reason": ""}),
        ("correct_balance", {"amount": "0", "reason": "zero"}),
        ("correct_balance", {"amount": "abc", "reason": "not a number"}),
        ("correct_balance", {"amount": "1.0000001", "reason": "below a micro-dollar"}),
    ],
)
def test_bad_forms_are_shown_again_and_change_nothing(world, staff_client, action, form):
    before = (_ledger(world.org), Org.objects.get(pk=world.org.pk).balance_micros)
    response = _act(staff_client, action, [world.org], apply="1", **form)
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert (_ledger(world.org), Org.objects.get(pk=world.org.pk).balance_micros) == before


def test_people_who_are_not_staff_cannot_grant(world, client):
    client.force_login(world.owner)
    before = _ledger(world.org)
    response = _act(client, "grant_credit", [world.org], apply="1", amount="100", reason="free money")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert _ledger(world.org) == before
