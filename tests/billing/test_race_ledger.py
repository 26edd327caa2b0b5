"""The ledger under concurrent charging (SPEC §11; apps.work.writer).

Many agents act at once with enforcement on: every charge is one ledger row, the rows
sum to exactly what was done, the balance moves by exactly that, and each row's
balance-after continues the previous one. With little credit left, racing agents never
drive the balance below zero, and the actions that do not fit are refused with
BILLING_INACTIVE and leave nothing behind. Card top-ups landing (each delivered twice, at
once) during heavy metering are credited exactly once each, in the same continuous ledger.
"""

from __future__ import annotations

import pytest
from django.db.models import Sum

from apps.billing import pricing
from apps.billing.models import LedgerEntry, Tier
from apps.core.errors import ServiceError
from apps.issues.chain import verify_org
from apps.issues.models import Comment, Issue
from apps.issues.services import comment_create, label_save
from apps.leases.services import check_claim, checkpoint, heartbeat, next_issue
from apps.orgs.models import Org
from tests.conftest import is_postgres, make_agent, new_issue
from tests.fakes.stripe import WEBHOOK_SECRET, paid_session_event, signed
from tests.leases.test_race import race

pytestmark = pytest.mark.slow


@pytest.fixture
def enforcing(settings):
    settings.RETASC_BILLING_ENFORCE = True
    pricing.invalidate()
    yield
    pricing.invalidate()


def _agents(tw, n):
    return [make_agent(tw.org, tw.owner if i % 2 else tw.member, tw.project).actor for i in range(n)]


def _assert_ledger_continuous(org_id, since_pk, start_balance):
    """Rows after ``since_pk`` in insertion order: each balance-after is the previous one
    plus its amount, and none is negative."""
    balance = start_balance
    for amount, after in (
        LedgerEntry.objects.filter(org_id=org_id, pk__gt=since_pk)
        .order_by("pk")
        .values_list("amount_micros", "balance_after_micros")
    ):
        balance += amount
        assert after == balance
        assert after >= 0
    return balance


def test_concurrent_charges_sum_exactly(tworld, enforcing):
    # Given: agents, one issue each to comment on, and the org's ledger position.
    threads, each = (24, 4) if is_postgres() else (6, 3)
    agents = _agents(tworld, threads)
    org = Org.objects.get(pk=tworld.org.pk)
    start, spent_before = org.balance_micros, org.spend_month_micros
    since = LedgerEntry.objects.filter(org_id=org.pk).order_by("-pk").values_list("pk", flat=True).first()
    work, bookkeeping, plumbing = (pricing.price_of(t) for t in (Tier.WORK, Tier.BOOKKEEPING, Tier.PLUMBING))
    per_round = work + work + bookkeeping + plumbing
    expected = threads * each * per_round
    assert expected < start  # enforcement must refuse nothing here

    def work_loop(i):
        for k in range(each):
            issue = new_issue(agents[i], f"T{i}.{k}")  # work tier
            comment_create(actor=agents[i], issue=issue.identifier, body="progress")  # work tier
            label_save(actor=agents[i], name=f"l-{i}-{k}")  # bookkeeping tier
            check_claim(actor=agents[i], identifier=issue.identifier)  # a read: plumbing tier

    # When
    results, errors = race(threads, work_loop)

    # Then: one row per action, the exact total, and a continuous balance.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    rows = LedgerEntry.objects.filter(org_id=org.pk, pk__gt=since)
    assert rows.count() == threads * each * 4
    assert rows.aggregate(total=Sum("amount_micros"))["total"] == -expected
    assert {a: rows.filter(action=a).count() for a in ("issue_create", "save_comment", "save_label", "check_claim")} == {
        a: threads * each for a in ("issue_create", "save_comment", "save_label", "check_claim")
    }
    org.refresh_from_db()
    assert org.balance_micros == start - expected
    assert org.spend_month_micros == spent_before + expected
    assert _assert_ledger_continuous(org.pk, since, start) == org.balance_micros
    assert verify_org(org) is None


def test_racing_agents_never_overdraw_and_refusals_change_nothing(tworld, enforcing):
    # Given: an issue to comment on, one agent holding a claim (for wind-down actions),
    # and credit for exactly five comments plus a little.
    threads, tries = (24, 3) if is_postgres() else (6, 3)
    agents = _agents(tworld, threads)
    target = new_issue(tworld.a, "Discussion", status="blocked")
    new_issue(tworld.a, "Held work")
    held = next_issue(actor=tworld.b)
    assert held["issue"] is not None
    work = pricing.price_of(Tier.WORK)
    left_over = work // 2
    Org.objects.filter(pk=tworld.org.pk).update(balance_micros=5 * work + left_over)
    since = LedgerEntry.objects.filter(org_id=tworld.org.pk).order_by("-pk").values_list("pk", flat=True).first()
    comments_before = Comment.objects.filter(issue=target).count()
    seq_before = Org.objects.get(pk=tworld.org.pk).activity_seq

    def work_loop(i):
        outcome = {"ok": 0, "refused": []}
        for k in range(tries):
            try:
                comment_create(actor=agents[i], issue=target.identifier, body=f"{i}.{k}")
                outcome["ok"] += 1
            except ServiceError as exc:
                outcome["refused"].append(exc.code)
        return outcome

    # When: far more comments are attempted than the credit pays for.
    results, errors = race(threads, work_loop)

    # Then: exactly five went through, every other one was refused for billing, and the
    # balance never went below zero.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    assert sum(r["ok"] for r in results) == 5
    refused = [code for r in results for code in r["refused"]]
    assert refused == ["BILLING_INACTIVE"] * (threads * tries - 5)
    org = Org.objects.get(pk=tworld.org.pk)
    assert org.balance_micros == left_over
    assert Comment.objects.filter(issue=target).count() == comments_before + 5
    assert org.activity_seq == seq_before + 5  # refused actions left no receipt
    rows = LedgerEntry.objects.filter(org_id=org.pk, pk__gt=since)
    assert rows.count() == 5
    assert _assert_ledger_continuous(org.pk, since, 5 * work + left_over) == left_over

    # And: winding down still works and charges at most what is left, never below zero.
    ident, token = held["issue"]["identifier"], held["claimToken"]
    checkpoint(actor=tworld.b, identifier=ident, note="stopping: out of credit", claim_token=token)
    heartbeat(actor=tworld.b, identifier=ident, claim_token=token)
    org.refresh_from_db()
    assert org.balance_micros == 0
    assert _assert_ledger_continuous(org.pk, since, 5 * work + left_over) == 0
    with pytest.raises(ServiceError) as refused_pull:
        next_issue(actor=tworld.a)
    assert refused_pull.value.code == "BILLING_INACTIVE"
    assert Issue.objects.filter(project=tworld.project, status="doing").count() == 1
    assert verify_org(org) is None


def test_racing_agents_stop_exactly_at_the_monthly_cap(tworld, enforcing):
    # Given: plenty of credit but a monthly cap with room for exactly three comments.
    from django.utils import timezone

    threads, tries = (16, 2) if is_postgres() else (6, 2)
    agents = _agents(tworld, threads)
    target = new_issue(tworld.a, "Discussion", status="blocked")
    work = pricing.price_of(Tier.WORK)
    month = timezone.now().strftime("%Y-%m")
    Org.objects.filter(pk=tworld.org.pk).update(
        balance_micros=10_000_000,
        spend_month=month,
        spend_month_micros=1000,
        monthly_cap_micros=1000 + 3 * work,
    )
    comments_before = Comment.objects.filter(issue=target).count()

    def work_loop(i):
        outcome = {"ok": 0, "refused": []}
        for k in range(tries):
            try:
                comment_create(actor=agents[i], issue=target.identifier, body=f"{i}.{k}")
                outcome["ok"] += 1
            except ServiceError as exc:
                outcome["refused"].append(exc.code)
        return outcome

    # When
    results, errors = race(threads, work_loop)

    # Then: three went through, the rest were refused at the cap, nothing was overspent.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    assert sum(r["ok"] for r in results) == 3
    assert [c for r in results for c in r["refused"]] == ["MONTHLY_CAP_REACHED"] * (threads * tries - 3)
    org = Org.objects.get(pk=tworld.org.pk)
    assert org.spend_month_micros == 1000 + 3 * work
    assert org.balance_micros == 10_000_000 - 3 * work
    assert Comment.objects.filter(issue=target).count() == comments_before + 3
    assert verify_org(org) is None


def test_top_ups_landing_during_heavy_metering_keep_the_ledger_exact(tworld, enforcing, settings):
    # Given: agents that will each do rounds of charged work, and card top-ups whose
    # events each arrive twice at the same moment (Stripe retries; two web processes).
    from django.test import Client

    settings.RETASC_STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    workers, each, topups = (16, 4, 6) if is_postgres() else (4, 2, 2)
    agents = _agents(tworld, workers)
    org = Org.objects.get(pk=tworld.org.pk)
    start = org.balance_micros
    since = LedgerEntry.objects.filter(org_id=org.pk).order_by("-pk").values_list("pk", flat=True).first()
    seq_before = org.activity_seq
    work, bookkeeping = pricing.price_of(Tier.WORK), pricing.price_of(Tier.BOOKKEEPING)
    charges = workers * each * (work + bookkeeping)
    assert charges < start  # nothing is refused: every amount below is exact
    cents = [1000, 2500, 5000, 10000] * topups
    events = [paid_session_event(f"cs_race_{n}", org.slug, cents[n]) for n in range(topups)]
    credited = sum(cents[:topups]) * 10_000
    deliveries = [events[n // 2] for n in range(2 * topups)]  # every event twice

    def act(i):
        if i < workers:
            for k in range(each):
                new_issue(agents[i], f"T{i}.{k}")  # work tier
                label_save(actor=agents[i], name=f"l-{i}-{k}")  # bookkeeping tier
            return None
        body, headers = signed(deliveries[i - workers])
        response = Client().post("/hooks/stripe", data=body, content_type="application/json", headers=headers)
        return response.status_code, response.json()["status"]

    # When: all of them at once.
    results, errors = race(workers + 2 * topups, act)

    # Then: each event credited once (the twin delivery was a duplicate), each charge once,
    # the balance moved by exactly credits minus charges, and the ledger is continuous.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    answers = sorted(r for r in results[workers:])
    assert answers == sorted([(200, "applied")] * topups + [(200, "duplicate")] * topups)
    rows = LedgerEntry.objects.filter(org_id=org.pk, pk__gt=since)
    assert rows.filter(action="topup").count() == topups
    assert rows.filter(action="topup").aggregate(t=Sum("amount_micros"))["t"] == credited
    assert rows.exclude(action="topup").count() == workers * each * 2
    assert rows.exclude(action="topup").aggregate(t=Sum("amount_micros"))["t"] == -charges
    org.refresh_from_db()
    assert org.balance_micros == start + credited - charges
    assert _assert_ledger_continuous(org.pk, since, start) == org.balance_micros
    # One receipt per issue created and label saved, and one per top-up.
    assert org.activity_seq == seq_before + workers * each * 2 + topups
    assert verify_org(org) is None
