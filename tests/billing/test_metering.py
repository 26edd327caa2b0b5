"""Metering (SPEC §11): price table, one ledger row per charged action, credit, caps."""

from __future__ import annotations

import pytest
from django.db.models import F
from django.test import override_settings

from apps.billing import pricing
from apps.billing.models import LedgerEntry, Price
from apps.billing.selectors import billing_summary, usage_summary
from apps.billing.services import billing_cap_set, credit_grant
from apps.core.errors import ServiceError
from apps.core.unit import metered_read
from apps.issues.models import Activity
from apps.issues.services import (
    attachment_create,
    attachment_obsolete,
    comment_create,
    comment_retract,
    issue_update,
    label_save,
    relation_add,
    relation_remove,
)
from apps.leases import services as leases
from apps.orgs.models import Org
from apps.orgs.services import NEW_ORG_CREDIT_MICROS, actor_for_human, session_key_mint
from tests.conftest import new_issue

enforced = override_settings(RETASC_BILLING_ENFORCE=True)


@pytest.fixture(autouse=True)
def fresh_prices():
    pricing.invalidate()
    yield
    pricing.invalidate()


def balance(org) -> int:
    return Org.objects.values_list("balance_micros", flat=True).get(pk=org.pk)


def set_balance(org, micros: int) -> None:
    Org.objects.filter(pk=org.pk).update(balance_micros=micros)


def charges(org):
    return LedgerEntry.objects.filter(org_id=org.pk).exclude(tier="credit").order_by("pk")


def refused(code: str, fn, unchanged) -> None:
    with unchanged():
        with pytest.raises(ServiceError) as err:
            fn()
    assert err.value.code == code
    assert err.value.http_status == 402


# --- the price table and the credit ---------------------------------------------------


def test_price_table_is_seeded(db):
    assert dict(Price.objects.values_list("tier", "amount_micros")) == {
        "dispatch": 7000,
        "work": 5000,
        "bookkeeping": 3000,
        "plumbing": 1000,
        "heartbeat": 100,
    }


def test_new_org_gets_ten_dollars(world):
    credit = LedgerEntry.objects.get(org_id=world.other_org.pk, tier="credit")
    assert (credit.amount_micros, credit.balance_after_micros, credit.note) == (10_000_000, 10_000_000, "new org credit")
    assert NEW_ORG_CREDIT_MICROS == 10_000_000
    assert balance(world.other_org) == 10_000_000  # key minting and set-up are not charged


def test_prices_are_editable(world):
    Price.objects.filter(tier="work").update(amount_micros=1234)
    pricing.invalidate()
    new_issue(world.a, "Cheaper now")
    row = charges(world.org).last()
    assert (row.tier, row.amount_micros) == ("work", -1234)


def test_credit_grant(world):
    before = balance(world.org)
    assert credit_grant(org=world.org, amount_micros=5_000_000, note="staff grant") == before + 5_000_000
    with pytest.raises(ServiceError):
        credit_grant(org=world.org, amount_micros=0, note="nothing")
    assert balance(world.org) == before + 5_000_000


# --- every action at its tier ---------------------------------------------------------


def _claimed(w):
    issue = new_issue(w.a, "Held")
    return issue, leases.claim_issue(actor=w.a, identifier=issue.identifier)["claimToken"]


def _case_retract(w):
    comment = comment_create(actor=w.a, issue=new_issue(w.a).identifier, body="oops")
    return lambda: comment_retract(actor=w.a, comment=str(comment.pk), note="wrong issue")


def _case_obsolete(w):
    att = attachment_create(actor=w.a, issue=new_issue(w.a).identifier, url="https://example.com/a")
    return lambda: attachment_obsolete(actor=w.a, attachment=str(att.pk), reason="stale")


def _case_remove_relation(w):
    a, b = new_issue(w.a, "A"), new_issue(w.a, "B")
    relation_add(actor=w.a, source_id=a.identifier, target_id=b.identifier, type="blocks")
    return lambda: relation_remove(actor=w.a, source_id=a.identifier, target_id=b.identifier, type="blocks")


def _case_heartbeat(w):
    issue, token = _claimed(w)
    return lambda: leases.heartbeat(actor=w.a, identifier=issue.identifier, claim_token=token)


def _case_checkpoint(w):
    issue, token = _claimed(w)
    return lambda: leases.checkpoint(actor=w.a, identifier=issue.identifier, note="half", claim_token=token)


def _case_release(w):
    issue, token = _claimed(w)
    return lambda: leases.release_issue(actor=w.a, identifier=issue.identifier, claim_token=token)


def _case_check_claim(w):
    issue, _ = _claimed(w)
    return lambda: leases.check_claim(actor=w.a, identifier=issue.identifier)


def _case_next_batch_claim(w):
    new_issue(w.a, "one")
    new_issue(w.a, "two")
    return lambda: leases.next_batch(actor=w.a, n=2, claim=True)


CASES = {
    # name: (setup returning the call, action, tier)
    "create": (lambda w: lambda: new_issue(w.a, "New"), "issue_create", "work"),
    "body edit": (
        lambda w: (lambda i: lambda: issue_update(actor=w.a, identifier=i.identifier, body="b"))(new_issue(w.a)),
        "issue_body_edit",
        "work",
    ),
    "title edit": (
        lambda w: (lambda i: lambda: issue_update(actor=w.a, identifier=i.identifier, title="t2"))(new_issue(w.a)),
        "issue_edit",
        "bookkeeping",
    ),
    "labels edit": (
        lambda w: (lambda i: lambda: issue_update(actor=w.a, identifier=i.identifier, labels=["x"]))(new_issue(w.a)),
        "issue_edit",
        "bookkeeping",
    ),
    "comment": (
        lambda w: (lambda i: lambda: comment_create(actor=w.a, issue=i.identifier, body="c"))(new_issue(w.a)),
        "save_comment",
        "work",
    ),
    "retract": (_case_retract, "retract_comment", "bookkeeping"),
    "label": (lambda w: lambda: label_save(actor=w.a, name="infra"), "save_label", "bookkeeping"),
    "attachment": (
        lambda w: (lambda i: lambda: attachment_create(actor=w.a, issue=i.identifier, url="https://e.com/x"))(new_issue(w.a)),
        "save_attachment",
        "bookkeeping",
    ),
    "obsolete attachment": (_case_obsolete, "obsolete_attachment", "bookkeeping"),
    "add relation": (
        lambda w: (lambda a, b: lambda: relation_add(actor=w.a, source_id=a.identifier, target_id=b.identifier, type="related"))(
            new_issue(w.a), new_issue(w.a)
        ),
        "add_relation",
        "dispatch",
    ),
    "remove relation": (_case_remove_relation, "remove_relation", "dispatch"),
    "next_issue": (lambda w: (new_issue(w.a), lambda: leases.next_issue(actor=w.a))[1], "next_issue", "dispatch"),
    "next_batch claim": (_case_next_batch_claim, "next_batch_claim", "dispatch"),
    "claim_issue": (
        lambda w: (lambda i: lambda: leases.claim_issue(actor=w.a, identifier=i.identifier))(new_issue(w.a)),
        "claim_issue",
        "dispatch",
    ),
    "heartbeat": (_case_heartbeat, "heartbeat", "heartbeat"),
    "checkpoint": (_case_checkpoint, "checkpoint", "work"),
    "release": (_case_release, "release_issue", "plumbing"),
    "mint_session_key": (lambda w: lambda: session_key_mint(actor=w.a), "mint_session_key", "plumbing"),
    "read check_claim": (_case_check_claim, "check_claim", "plumbing"),
    "read next_batch peek": (lambda w: lambda: leases.next_batch(actor=w.a, n=3), "next_batch", "plumbing"),
    "empty pull is a read": (lambda w: lambda: leases.next_issue(actor=w.a), "next_issue_empty", "plumbing"),
}
PRICES = {"dispatch": 7000, "work": 5000, "bookkeeping": 3000, "plumbing": 1000, "heartbeat": 100}


@pytest.mark.parametrize("name", list(CASES))
def test_each_action_charges_its_tier_once(world, name):
    setup, action, tier = CASES[name]
    call = setup(world)
    rows_before = charges(world.org).count()
    before = balance(world.org)

    call()

    new_rows = list(charges(world.org)[rows_before:])
    assert len(new_rows) == 1
    row = new_rows[0]
    assert (row.org_id, row.key_id, row.principal_id) == (world.org.pk, world.a.key_id, world.owner.pk)
    assert (row.action, row.tier, row.amount_micros) == (action, tier, -PRICES[tier])
    assert row.balance_after_micros == before - PRICES[tier] == balance(world.org)


def test_member_is_charged_as_themself(world):
    new_issue(world.b, "By the member")
    row = charges(world.org).last()
    assert (row.key_id, row.principal_id, row.action) == (world.b.key_id, world.member.pk, "issue_create")


def test_humans_and_system_jobs_are_not_charged(world, clock):
    human = actor_for_human(user=world.owner, org=world.org)
    before, rows = balance(world.org), charges(world.org).count()
    issue = new_issue(human, "From the Dash")
    issue_update(actor=human, identifier=issue.identifier, title="Still free")
    metered_read(human, "get_issue")
    leases.claim_issue(actor=world.a, identifier=issue.identifier)  # charged: an agent
    clock.advance(seconds=world.org.lease_ttl + 1)
    assert leases.reclaim_expired() == 1  # the system job: not charged
    assert balance(world.org) == before - 7000
    assert [r.action for r in charges(world.org)[rows:]] == ["claim_issue"]
    assert Activity.objects.filter(issue_id=issue.pk, verb="reclaimed", principal_id=None, runtime="system").count() == 1


# --- enforcement ----------------------------------------------------------------------


def test_enforcement_off_proceeds_and_still_meters(world):
    set_balance(world.org, 0)
    issue = new_issue(world.a, "Allowed anyway")
    leases.claim_issue(actor=world.a, identifier=issue.identifier)
    assert balance(world.org) == -12000
    assert [(r.action, r.amount_micros, r.balance_after_micros) for r in charges(world.org)][-2:] == [
        ("issue_create", -5000, -5000),
        ("claim_issue", -7000, -12000),
    ]


@enforced
def test_exhausted_balance_blocks_dispatch_and_create(world, unchanged):
    issue, token = _claimed(world)
    waiting = new_issue(world.a, "Waiting")
    set_balance(world.org, 50)

    refused("BILLING_INACTIVE", lambda: new_issue(world.a, "No credit"), unchanged)
    refused("BILLING_INACTIVE", lambda: leases.next_issue(actor=world.a), unchanged)
    refused("BILLING_INACTIVE", lambda: leases.claim_issue(actor=world.b, identifier=waiting.identifier), unchanged)
    refused("BILLING_INACTIVE", lambda: comment_create(actor=world.a, issue=issue.identifier, body="x"), unchanged)
    assert balance(world.org) == 50

    # Reads still work, and the running work winds down; the balance stops at zero.
    assert leases.check_claim(actor=world.a, identifier=issue.identifier)["youHold"] is True
    assert balance(world.org) == 0
    leases.heartbeat(actor=world.a, identifier=issue.identifier, claim_token=token)
    leases.checkpoint(actor=world.a, identifier=issue.identifier, note="stopping here", claim_token=token)
    done = leases.release_issue(actor=world.a, identifier=issue.identifier, claim_token=token)
    assert done["released"] is True
    assert balance(world.org) == 0
    tail = list(charges(world.org))[-4:]
    assert [(r.action, r.amount_micros, r.balance_after_micros) for r in tail] == [
        ("check_claim", -50, 0),
        ("heartbeat", 0, 0),
        ("checkpoint", 0, 0),
        ("release_issue", 0, 0),
    ]
    assert LedgerEntry.objects.filter(org_id=world.org.pk, balance_after_micros__lt=0).count() == 0

    # Humans are not billed, so the Dash keeps working; credit brings the agents back.
    new_issue(actor_for_human(user=world.owner, org=world.org), "Human triage")
    credit_grant(org=world.org, amount_micros=1_000_000, note="top-up")
    assert leases.claim_issue(actor=world.b, identifier=waiting.identifier)["claimToken"]


@enforced
def test_exact_balance_is_spent_to_zero(world):
    set_balance(world.org, 5000)
    new_issue(world.a, "Last one")
    assert balance(world.org) == 0


@enforced
def test_monthly_cap(world, unchanged):
    issue, token = _claimed(world)
    org = Org.objects.get(pk=world.org.pk)
    Org.objects.filter(pk=org.pk).update(monthly_cap_micros=org.spend_month_micros + 6000)
    new_issue(world.a, "Under the cap")  # 5000: spend is now cap - 1000

    refused("MONTHLY_CAP_REACHED", lambda: new_issue(world.a, "Over"), unchanged)
    refused("MONTHLY_CAP_REACHED", lambda: leases.next_issue(actor=world.b), unchanged)
    # Reads and wind-down still work.
    leases.check_claim(actor=world.a, identifier=issue.identifier)
    leases.heartbeat(actor=world.a, identifier=issue.identifier, claim_token=token)
    leases.checkpoint(actor=world.a, identifier=issue.identifier, note="n", claim_token=token)
    leases.release_issue(actor=world.a, identifier=issue.identifier, claim_token=token)
    assert balance(world.org) >= 0

    # The owner raises the cap: that is never blocked, and work resumes.
    billing_cap_set(actor=world.a, cap_micros=None)
    new_issue(world.a, "Resumed")


@enforced
def test_cap_counts_this_month_only(world):
    Org.objects.filter(pk=world.org.pk).update(spend_month="2000-01", spend_month_micros=10**9, monthly_cap_micros=5000)
    new_issue(world.a, "New month, fresh cap")
    org = Org.objects.get(pk=world.org.pk)
    assert org.spend_month != "2000-01" and org.spend_month_micros == 5000


def test_spend_month_tracks_charges(world):
    org = Org.objects.get(pk=world.org.pk)
    start = org.spend_month_micros
    new_issue(world.a, "x")
    metered_read(world.a, "get_issue")
    assert Org.objects.get(pk=world.org.pk).spend_month_micros == start + 6000


# --- the monthly cap setter -----------------------------------------------------------


def test_owner_sets_the_cap_with_a_receipt_and_no_charge(world):
    rows = charges(world.org).count()
    seq = Org.objects.get(pk=world.org.pk).activity_seq
    assert billing_cap_set(actor=world.a, cap_micros=2_000_000) == {"monthlyCapMicros": 2_000_000}
    org = Org.objects.get(pk=world.org.pk)
    assert org.monthly_cap_micros == 2_000_000
    assert charges(world.org).count() == rows
    entry = Activity.objects.get(org_id=org.pk, seq=seq + 1)
    assert (entry.verb, entry.changes) == ("billing_cap_set", {"monthlyCapMicros": [None, 2_000_000]})
    billing_cap_set(actor=world.a, cap_micros=2_000_000)  # no change: no receipt
    assert Org.objects.get(pk=world.org.pk).activity_seq == seq + 1


def test_member_cannot_set_the_cap(world, unchanged):
    with unchanged():
        with pytest.raises(ServiceError) as err:
            billing_cap_set(actor=world.b, cap_micros=1)
    assert err.value.code == "FORBIDDEN"
    assert Org.objects.get(pk=world.org.pk).monthly_cap_micros is None


@pytest.mark.parametrize("value", [-1, True, "5000", 1.5, 10**14])
def test_cap_value_is_validated(world, unchanged, value):
    with unchanged():
        with pytest.raises(ServiceError) as err:
            billing_cap_set(actor=world.a, cap_micros=value)
    assert err.value.code == "INVALID_ARGUMENT"
    assert Org.objects.get(pk=world.org.pk).monthly_cap_micros is None


# --- selectors ------------------------------------------------------------------------


def test_usage_summary(world, django_assert_num_queries):
    new_issue(world.a, "one")
    new_issue(world.b, "two")
    leases.next_issue(actor=world.b)
    metered_read(world.a, "get_issue")
    new_issue(world.x, "other org")  # never counted for acme

    with django_assert_num_queries(3):
        usage = usage_summary(actor=world.a)

    assert usage["spentMicros"] == 5000 + 5000 + 7000 + 1000
    assert usage["actions"] == 4
    assert usage["byTier"] == {
        "dispatch": {"micros": 7000, "count": 1},
        "work": {"micros": 10000, "count": 2},
        "bookkeeping": {"micros": 0, "count": 0},
        "plumbing": {"micros": 1000, "count": 1},
        "heartbeat": {"micros": 0, "count": 0},
    }
    assert usage["byKey"] == [
        {
            "key": world.b.key.prefix,
            "label": world.b.key.label,
            "runtime": "codex",
            "principal": world.member.email,
            "micros": 12000,
            "count": 2,
        },
        {
            "key": world.a.key.prefix,
            "label": world.a.key.label,
            "runtime": "claude-code",
            "principal": world.owner.email,
            "micros": 6000,
            "count": 2,
        },
    ]
    assert usage["byRuntime"] == {"codex": {"micros": 12000, "count": 2}, "claude-code": {"micros": 6000, "count": 2}}
    assert usage["byAction"]["issue_create"] == {"micros": 10000, "count": 2}
    assert usage_summary(actor=world.x)["spentMicros"] == 5000


def test_billing_summary(world, django_assert_num_queries):
    new_issue(world.a, "one")
    billing_cap_set(actor=world.a, cap_micros=3_000_000)
    billing_summary(actor=world.a)  # warm the price cache
    with django_assert_num_queries(2):
        summary = billing_summary(actor=world.b)
    assert summary["balanceMicros"] == 10_000_000 - 5000
    assert summary["monthlyCapMicros"] == 3_000_000
    assert summary["monthSpendMicros"] == 5000
    assert (summary["enforced"], summary["blocked"], summary["wouldBlock"]) == (False, None, None)
    assert summary["prices"] == PRICES
    assert [(r["action"], r["amountMicros"], r["balanceAfterMicros"]) for r in summary["recent"]] == [
        ("issue_create", -5000, 9_995_000),
        ("credit", 10_000_000, 10_000_000),
    ]
    assert summary["recent"][0]["key"] == world.a.key.prefix
    assert summary["recent"][1]["note"] == "new org credit"


@enforced
def test_billing_summary_says_what_blocks(world):
    set_balance(world.org, 10)
    assert billing_summary(actor=world.a)["blocked"] == "BILLING_INACTIVE"
    Org.objects.filter(pk=world.org.pk).update(balance_micros=F("balance_micros") + 10**7, monthly_cap_micros=0)
    summary = billing_summary(actor=world.a)
    assert (summary["enforced"], summary["blocked"]) == (True, "MONTHLY_CAP_REACHED")
