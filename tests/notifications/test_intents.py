"""Chat intents act as the bound member through the same services; anything that changes
state waits for a "yes"; unknown text gets one line of help."""

from __future__ import annotations

from apps.issues.models import Comment, Issue
from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.leases.revocation import member_suspend
from apps.notifications.delivery import deliver_due
from apps.notifications.models import Mute
from apps.orgs.models import Membership
from tests.conftest import new_issue


def say(net, text):
    return net.telegram_say(2, text).json()["text"]


def in_review(net):
    """An issue by the member's agent, in review, with the owner as reviewer."""
    issue = new_issue(net.w.b, "Review me", assignee=net.w.owner.email)
    claim = leases.claim_issue(actor=net.w.b, identifier=issue.identifier)
    leases.checkpoint(actor=net.w.b, identifier=issue.identifier, note="ready", claim_token=claim["claimToken"])
    issue_update(actor=net.w.b, identifier=issue.identifier, status="review", claim_token=claim["claimToken"])
    return issue


def test_unknown_text_gets_one_line_of_help(net):
    net.bind_telegram(net.w.member, 2)
    help_text = say(net, "what can you do?")
    assert help_text.startswith("Say: status, show KEY-N") and "\n" not in help_text


def test_status_and_show(net):
    net.bind_telegram(net.w.owner, 2)
    issue = in_review(net)
    assert say(net, "status") == "Reviews for you: 1. Doing: 0. To do, assigned to you: 0."
    shown = say(net, f"show {issue.identifier.lower()}")
    assert shown.startswith(f"{issue.identifier} [review] Review me") and f"/issues/{issue.identifier}/" in shown
    assert "not found" in say(net, "show NOPE-99")


def test_approve_asks_first_then_acts_as_the_member(net):
    net.bind_telegram(net.w.owner, 2)
    issue = in_review(net)
    assert say(net, f"approve {issue.identifier}") == f"Reply yes to approve {issue.identifier} (or no)."
    assert Issue.objects.get(pk=issue.pk).status == "review"  # nothing yet

    assert say(net, "yes") == f"Approved {issue.identifier}."
    assert Issue.objects.get(pk=issue.pk).status == "done"
    assert say(net, "yes") == "Nothing is waiting for a yes."


def test_the_author_cannot_approve_their_own_work_from_chat_either(net):
    net.bind_telegram(net.w.member, 2)  # the member submitted the review
    issue = in_review(net)
    say(net, f"approve {issue.identifier}")
    assert "another person must review it" in say(net, "yes")
    assert Issue.objects.get(pk=issue.pk).status == "review"


def test_comment_asks_first_and_no_drops_it(net):
    net.bind_telegram(net.w.member, 2)
    issue = new_issue(net.w.a, "Talk")
    assert say(net, f"comment {issue.identifier} looks good to me").startswith("Reply yes to comment")
    assert say(net, "no") == "Canceled."
    assert Comment.objects.count() == 0
    say(net, f"comment {issue.identifier} looks good to me")
    assert say(net, "yes") == f"Commented on {issue.identifier}."
    (comment,) = Comment.objects.all()
    assert comment.body == "looks good to me" and comment.author_id == net.w.member.pk


def test_mute_and_unmute(net):
    net.bind_telegram(net.w.member, 2)
    assert say(net, "mute everything").startswith("Kinds: done, canceled")
    say(net, "mute done")
    assert Mute.objects.count() == 0  # asks first
    assert say(net, "yes") == "Muted done."
    assert list(Mute.objects.values_list("user_id", "kind")) == [(net.w.member.pk, "done")]
    say(net, "unmute done")
    assert say(net, "yes") == "Unmuted done."
    assert Mute.objects.count() == 0


def test_intents_work_over_slack_and_discord_too(net):
    net.bind_slack(net.w.member, "U9")
    net.bind_discord(net.w.member, "900")
    assert net.slack_say("U9", "status").json()["text"].startswith("Reviews for you:")
    assert net.discord_say("900", "say", {"text": "status"}).json()["data"]["content"].startswith("Reviews for you:")


def test_a_suspended_member_cannot_act_from_chat_and_hears_nothing_more(net):
    net.bind_telegram(net.w.member, 2)
    issue = new_issue(net.w.b, "Before the suspension")
    claim = leases.claim_issue(actor=net.w.a, identifier=issue.identifier)
    issue_update(actor=net.w.a, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])
    membership = Membership.objects.get(org=net.w.org, user=net.w.member)
    member_suspend(actor=net.owner, member_id=str(membership.pk))

    assert say(net, "status") == "You are not an active member of this org."
    assert deliver_due()["sent"] == 0
    assert net.f.telegram.texts_to(2) == []
