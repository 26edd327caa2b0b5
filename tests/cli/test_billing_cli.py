"""`retasc billing` against a live Daphne: the summary with --json, and the cap."""

from __future__ import annotations

from apps.issues.models import Activity
from apps.issues.services import label_save
from apps.orgs.models import Org


def test_billing_shows_balance_spend_cap_and_last_entries(tworld, cli_factory):
    owner = cli_factory()
    owner.sign_in_as(tworld.owner)
    for name in ("one", "two"):
        label_save(actor=tworld.a, name=name)  # two charges after the new-org credit

    shown = owner.json("billing")

    org = Org.objects.get(pk=tworld.org.pk)
    assert shown["balanceMicros"] == org.balance_micros
    assert shown["monthSpendMicros"] == org.spend_month_micros
    assert shown["monthlyCapMicros"] is None
    assert [(e["action"], e["amountMicros"]) for e in shown["ledger"]] == [
        ("save_label", -3000),
        ("save_label", -3000),
        ("credit", 10_000_000),
    ]
    text = owner("billing")
    assert text.exit_code == 0, text.stderr
    assert f"Balance:      ${org.balance_micros / 1_000_000:,.2f}" in text.stdout and "(cap none)" in text.stdout
    assert text.stdout.count("save_label") == 2 and "new org credit" in text.stdout


def test_billing_cap_sets_and_clears(tworld, cli_factory):
    owner, member = cli_factory(), cli_factory()
    owner.sign_in_as(tworld.owner)
    member.sign_in_as(tworld.member)
    seq = Org.objects.get(pk=tworld.org.pk).activity_seq

    assert owner.json("billing", "cap", "50") == {"monthlyCapMicros": 50_000_000}
    assert Org.objects.get(pk=tworld.org.pk).monthly_cap_micros == 50_000_000
    assert "(cap $50.00)" in owner("billing").stdout
    cleared = owner("billing", "cap", "--clear")
    assert cleared.exit_code == 0 and cleared.stdout.strip() == "Monthly cap cleared."
    assert Org.objects.get(pk=tworld.org.pk).monthly_cap_micros is None
    assert (
        list(Activity.objects.filter(org_id=tworld.org.pk, seq__gt=seq).values_list("verb", flat=True)) == ["billing_cap_set"] * 2
    )

    # Refusals: one sentence, nothing changed.
    before = Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=tworld.org.pk)
    denied = member("billing", "cap", "10")
    assert denied.exit_code == 1 and "(FORBIDDEN)" in denied.stderr and "Traceback" not in denied.stderr
    assert owner("billing", "cap", "fifty").exit_code == 2
    assert owner("billing", "cap", "5", "--clear").exit_code == 2
    assert owner("billing", "cap").exit_code == 2
    assert Org.objects.values_list("monthly_cap_micros", "activity_seq").get(pk=tworld.org.pk) == before
