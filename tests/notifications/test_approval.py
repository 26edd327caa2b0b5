"""Approval links: signed and single use; GET shows a confirmation page, only POST acts."""

from __future__ import annotations

import re

from django.test import Client

from apps.issues.models import Issue
from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.notifications.delivery import deliver_due
from apps.notifications.models import ApprovalLink
from tests.conftest import new_issue


def review_with_link(net):
    net.bind_telegram(net.w.owner, 1)
    issue = new_issue(net.w.b, "Approve by link", assignee=net.w.owner.email)
    claim = leases.claim_issue(actor=net.w.b, identifier=issue.identifier)
    leases.checkpoint(actor=net.w.b, identifier=issue.identifier, note="ready", claim_token=claim["claimToken"])
    issue_update(actor=net.w.b, identifier=issue.identifier, status="review", claim_token=claim["claimToken"])
    deliver_due()
    (text,) = [t for t in net.f.telegram.texts_to(1) if "review" in t]
    path = re.search(r"https?://[^/]+(/n/approve/[^/\s]+/)", text).group(1)
    return issue, path


def test_get_only_shows_post_approves_and_a_second_use_is_refused(net):
    issue, path = review_with_link(net)
    browser = Client()

    page = browser.get(path)
    assert page.status_code == 200 and b"Approve by link" in page.content
    assert Issue.objects.get(pk=issue.pk).status == "review"  # GET changed nothing

    done = browser.post(path)
    assert done.status_code == 200 and b"Approved" in done.content
    assert Issue.objects.get(pk=issue.pk).status == "done"
    (link,) = ApprovalLink.objects.all()
    used_at = link.used_at
    assert used_at is not None

    again = browser.post(path)
    assert again.status_code == 409 and b"already used" in again.content
    assert browser.get(path).status_code == 409
    assert ApprovalLink.objects.get().used_at == used_at


def test_a_tampered_link_is_refused(net):
    issue, path = review_with_link(net)
    forged = path[:-3] + ("A" if path[-3] != "A" else "B") + path[-2:]
    assert Client().post(forged).status_code == 404
    assert Issue.objects.get(pk=issue.pk).status == "review"
    assert ApprovalLink.objects.get().used_at is None
