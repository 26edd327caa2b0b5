"""Who hears about what (SPEC §10): exactly the humans tied to the issue, on each channel
they bound, never about their own action, mutes applied at send time."""

from __future__ import annotations

from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.issues.services import comment_create, issue_update
from apps.leases import services as leases
from apps.notifications import services
from apps.notifications.models import Delivery, Outbox
from tests.conftest import new_issue


def heard(net, user_n: int) -> list[str]:
    """Every text the person bound as number ``user_n`` received, on all four channels (sorted)."""
    f = net.f
    email = net.w.owner.email if user_n == 1 else net.w.member.email
    texts = f.slack.texts_to(f"U{user_n}") + f.discord.texts_to(f"{user_n}00") + f.telegram.texts_to(user_n)
    texts += [m.body for m in mail.outbox if m.to == [email]]
    return sorted(texts)


def bound(net):
    net.bind_everywhere(net.w.owner, 1)
    net.bind_everywhere(net.w.member, 2)


def finish(actor, identifier):
    claim = leases.claim_issue(actor=actor, identifier=identifier)
    return issue_update(actor=actor, identifier=identifier, status="done", claim_token=claim["claimToken"])


def test_done_reaches_the_author_on_every_channel_and_nobody_else(net, deliver):
    bound(net)
    issue = new_issue(net.w.b, "Ship the parser")  # the member's agent: the member is the author
    finish(net.w.a, issue.identifier)  # the owner's agent finishes it

    counts = deliver()

    assert counts["sent"] == 4
    texts = heard(net, 2)
    assert len(texts) == 4
    assert all(t.startswith(f"{issue.identifier} is done: Ship the parser") for t in texts)
    assert all(f"/issues/{issue.identifier}/" in t for t in texts)
    assert heard(net, 1) == []


def test_own_action_is_silent(net, deliver):
    bound(net)
    issue = new_issue(net.w.b, "Mine")
    finish(net.w.b, issue.identifier)  # the author's own agent: the same principal

    assert Outbox.objects.count() == 0
    assert deliver()["sent"] == 0
    assert heard(net, 2) == [] and heard(net, 1) == []


def test_canceled_tells_the_author_the_reason(net, deliver):
    bound(net)
    issue = new_issue(net.w.b, "Old idea")
    issue_update(actor=net.owner, identifier=issue.identifier, status="canceled", cancel_reason="superseded by ACME-9")
    deliver()
    texts = heard(net, 2)
    assert len(texts) == 4
    assert all("was canceled: Old idea" in t and "Reason: superseded by ACME-9" in t for t in texts)
    assert heard(net, 1) == []


def test_review_requested_tells_the_reviewer_with_the_checkpoint_and_assigned_tells_the_assignee(net, deliver):
    bound(net)
    issue = new_issue(net.w.b, "Needs eyes", assignee=net.w.owner.email)  # assigned to the owner at creation
    deliver()
    assigned = heard(net, 1)
    assert len(assigned) == 4 and all("is assigned to you: Needs eyes" in t for t in assigned)

    claim = leases.claim_issue(actor=net.w.b, identifier=issue.identifier)
    leases.checkpoint(actor=net.w.b, identifier=issue.identifier, note="parser done, see tests", claim_token=claim["claimToken"])
    issue_update(actor=net.w.b, identifier=issue.identifier, status="review", claim_token=claim["claimToken"])
    deliver()

    review = [t for t in heard(net, 1) if "review is requested" in t]
    assert len(review) == 4
    assert all("Handoff: parser done, see tests" in t and "/n/approve/" in t for t in review)
    assert heard(net, 2) == []  # the author submitted: told nothing


def test_reassignment_tells_only_the_new_assignee(net, deliver):
    bound(net)
    issue = new_issue(net.w.a, "Lane change")
    issue_update(actor=net.owner, identifier=issue.identifier, assignee=net.w.member.email)
    deliver()
    assert len(heard(net, 2)) == 4
    assert heard(net, 1) == []
    issue_update(actor=net.owner, identifier=issue.identifier, assignee=net.w.owner.email)  # to oneself: silent
    deliver()
    assert heard(net, 1) == []


def test_nobody_bound_writes_nothing_and_other_receipts_write_nothing(net, deliver):
    issue = new_issue(net.w.b, "Quiet")
    comment_create(actor=net.w.a, issue=issue.identifier, body="a comment is not an event")
    finish(net.w.a, issue.identifier)
    assert Outbox.objects.count() == 0


def test_a_claim_costs_notifications_no_statement_even_with_people_bound(net):
    bound(net)
    issue = new_issue(net.w.b, "Claim me")
    with CaptureQueriesContext(connection) as queries:
        leases.claim_issue(actor=net.w.a, identifier=issue.identifier)
    assert queries.captured_queries  # the claim ran
    assert not [q for q in queries.captured_queries if "notifications_" in q["sql"]]
    assert Outbox.objects.count() == 0


def test_mute_is_applied_at_send_time(net, deliver):
    bound(net)
    issue = new_issue(net.w.b, "Muted news")
    finish(net.w.a, issue.identifier)  # the outbox row is written before the mute
    services.mute_set(org_id=net.w.org.pk, user_id=net.w.member.pk, kind="done", muted=True)

    counts = deliver()

    assert counts["skipped"] == 4 and counts["sent"] == 0
    assert heard(net, 2) == []
    assert set(Delivery.objects.values_list("status", flat=True)) == {"skipped"}

    services.mute_set(org_id=net.w.org.pk, user_id=net.w.member.pk, kind="done", muted=False)
    other = new_issue(net.w.b, "Heard again")
    finish(net.w.a, other.identifier)
    deliver()
    assert len(heard(net, 2)) == 4


def test_texts_follow_the_members_language(net, deliver):
    from django.utils import translation

    with translation.override("zh-hans"):
        code, _ = services.binding_code_create(actor=net.member, channel_id=net.telegram.pk)
    assert net.telegram_say(77, f"/start {code}").status_code == 200
    issue = new_issue(net.w.b, "翻译")
    finish(net.w.a, issue.identifier)
    deliver()
    (text,) = net.f.telegram.texts_to(77)
    assert text.startswith(f"{issue.identifier} 已完成")
