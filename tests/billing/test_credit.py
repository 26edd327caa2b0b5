"""Staff credit (SPEC §11): grants and corrections are ledger entries with a reason, the
staff user and a receipt; the balance is never edited directly (the admin's actions)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from apps.billing.models import LedgerEntry
from apps.billing.selectors import usage_summary
from apps.billing.services import credit_correct, credit_grant
from apps.core.errors import ServiceError
from apps.issues.chain import verify_org
from apps.issues.models import Activity
from apps.orgs.models import Org


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "pw-staff-1")


def org_state(org):
    return (
        Org.objects.values_list("balance_micros", "activity_seq", "spend_month_micros").get(pk=org.pk),
        LedgerEntry.objects.filter(org_id=org.pk).count(),
    )


def test_a_staff_grant_is_an_entry_and_a_receipt_naming_staff_and_reason(world, staff):
    before = Org.objects.get(pk=world.org.pk).balance_micros

    after = credit_grant(org=world.org, amount_micros=12_500_000, note="  goodwill for the outage  ", principal_id=staff.pk)

    assert after == before + 12_500_000
    row = LedgerEntry.objects.filter(org_id=world.org.pk).latest("pk")
    assert (row.action, row.tier, row.amount_micros, row.balance_after_micros, row.principal_id, row.note) == (
        "credit",
        "credit",
        12_500_000,
        after,
        staff.pk,
        "goodwill for the outage",
    )
    receipt = Activity.objects.filter(org_id=world.org.pk).latest("seq")
    assert (receipt.verb, receipt.principal_id, receipt.runtime, receipt.key_id) == ("credit_grant", staff.pk, "staff", None)
    assert receipt.changes == {"balanceMicros": [before, after], "reason": "goodwill for the outage"}
    assert verify_org(Org.objects.get(pk=world.org.pk)) is None


def test_a_correction_takes_credit_back_may_go_below_zero_and_is_not_spend(world, staff):
    Org.objects.filter(pk=world.org.pk).update(balance_micros=1_000_000)
    spend_before = usage_summary(actor=world.a)["spentMicros"]

    after = credit_correct(org=world.org, amount_micros=-3_000_000, reason="double grant on 11-02", principal_id=staff.pk)

    assert after == -2_000_000
    org = Org.objects.get(pk=world.org.pk)
    assert org.balance_micros == -2_000_000
    row = LedgerEntry.objects.filter(org_id=org.pk).latest("pk")
    assert (row.action, row.tier, row.amount_micros, row.balance_after_micros, row.principal_id) == (
        "correction",
        "credit",
        -3_000_000,
        -2_000_000,
        staff.pk,
    )
    receipt = Activity.objects.filter(org_id=org.pk).latest("seq")
    assert (receipt.verb, receipt.changes) == (
        "credit_correct",
        {"balanceMicros": [1_000_000, -2_000_000], "reason": "double grant on 11-02"},
    )
    assert usage_summary(actor=world.a)["spentMicros"] == spend_before  # never counted as spend
    # A positive correction adds credit the same way.
    assert credit_correct(org=world.org, amount_micros=2_000_000, reason="undo", principal_id=staff.pk) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda org, s: credit_grant(org=org, amount_micros=0, note="zero", principal_id=s.pk),
        lambda org, s: credit_grant(org=org, amount_micros=-5, note="negative grant", principal_id=s.pk),
        lambda org, s: credit_grant(org=org, amount_micros=10**12 + 1, note="typo", principal_id=s.pk),
        lambda org, s: credit_grant(org=org, amount_micros=1_000_000, note="   ", principal_id=s.pk),
        lambda org, s: credit_grant(org=org, amount_micros=1.5, note="float", principal_id=s.pk),
        lambda org, s: credit_correct(org=org, amount_micros=0, reason="zero", principal_id=s.pk),
        lambda org, s: credit_correct(org=org, amount_micros=-1_000_000, reason="", principal_id=s.pk),
        lambda org, s: credit_correct(org=org, amount_micros=-1_000_000, reason="x" * 201, principal_id=s.pk),
    ],
)
def test_bad_grants_and_corrections_are_refused_and_change_nothing(world, staff, call):
    before = org_state(world.org)
    with pytest.raises(ServiceError) as err:
        call(world.org, staff)
    assert err.value.code == "INVALID_ARGUMENT"
    assert org_state(world.org) == before
