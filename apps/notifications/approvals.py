"""Approval links: signed, single-use, for one member and one review.

The link carries a signed reference to an ``ApprovalLink`` row. Its GET only shows a
confirmation page (a link preview or a mail scanner must not approve anything); the
POST uses the row (a conditional update: exactly one POST wins) and approves the review
as that member, through the same service as every other interface, in one transaction:
if the approval is refused, the link stays unused.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.utils import timezone

from apps.core.errors import ServiceError
from apps.issues.models import Issue
from apps.issues.services import issue_update
from apps.notifications.actors import member_actor
from apps.notifications.models import ApprovalLink

TTL = timedelta(days=7)
_SALT = "retasc.notifications.approval"


def link_url(*, org_id, user_id, issue_id, seed: str) -> str:
    """The URL of the link for this delivery (the same link on every retry of it)."""
    link_id = uuid.uuid5(uuid.NAMESPACE_URL, f"retasc-approval:{seed}")
    ApprovalLink.objects.get_or_create(
        pk=link_id,
        defaults={"org_id": org_id, "user_id": user_id, "issue_id": issue_id, "expires_at": timezone.now() + TTL},
    )
    return f"{settings.PUBLIC_URL}/n/approve/{signing.dumps(str(link_id), salt=_SALT)}/"


def _gone() -> ServiceError:
    return ServiceError("NOT_FOUND", "This approval link is not valid.")


def link_open(token: str) -> tuple[ApprovalLink, Issue]:
    """The link and its issue, for the confirmation page. Refuses a bad, used or expired link."""
    try:
        link_id = signing.loads(token, salt=_SALT)
    except signing.BadSignature:
        raise _gone() from None
    link = ApprovalLink.objects.filter(pk=link_id).first()
    if link is None:
        raise _gone()
    if link.used_at is not None:
        raise ServiceError("CONFLICT", "This approval link was already used.")
    if link.expires_at <= timezone.now():
        raise ServiceError("CONFLICT", "This approval link has expired; approve in the Dash.")
    issue = Issue.objects.select_related("project").filter(pk=link.issue_id).first()
    if issue is None:
        raise _gone()
    return link, issue


def link_use(token: str) -> Issue:
    """Approve the review (POST). Single use: a second POST is refused, nothing changes."""
    link, issue = link_open(token)
    actor = member_actor(org_id=link.org_id, user_id=link.user_id, runtime="link")
    with transaction.atomic():
        if ApprovalLink.objects.filter(pk=link.pk, used_at__isnull=True).update(used_at=timezone.now()) != 1:
            raise ServiceError("CONFLICT", "This approval link was already used.")
        if issue.status != "review":
            raise ServiceError("NOT_ELIGIBLE:" + issue.status, f"{issue.identifier} is not waiting for review.")
        return issue_update(actor=actor, identifier=issue.identifier, status="done")
