"""Placeholder people (SPEC §9): claimed by the member they stand for, or merged by an owner.

Imports and connectors write outside authors as placeholder members. When the real
person is a member, their history moves to them: issues they authored or submitted, the
issues in their lane (each with an ``updated`` receipt of the assignee, so folding the
receipts still rebuilds the issue), comments, checkpoints and attachments. Receipts
themselves are never rewritten (the chain would break): the move is one receipt that
names both people, so the placeholder's old receipts read as the member's.

These services sit above the issues (they move issue rows), so they live with the
imports, not in ``apps.orgs`` which the issues build on.
"""

from __future__ import annotations

from django.utils import timezone

from apps.core.errors import ServiceError, invalid, not_found
from apps.core.unit import mutation
from apps.intake.models import ImportedRecord
from apps.issues.models import Attachment, Checkpoint, Comment, Issue
from apps.orgs.actor import Actor
from apps.orgs.models import Membership
from apps.orgs.selectors import email_verified
from apps.orgs.services import owner_admin_only


def _placeholder(actor: Actor, ref) -> Membership:
    if isinstance(ref, Membership):
        ref = ref.pk
    text = str(ref).strip()
    if not (text.isascii() and text.isdigit() and len(text) < 19):
        raise not_found("Member")
    membership = (
        Membership.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(pk=int(text), org_id=actor.org.pk)
        .first()
    )
    if membership is None:
        raise not_found("Member")
    if not membership.is_placeholder:
        raise ServiceError("CONFLICT", f"{membership.user.get_full_name() or membership.user.email} is not a placeholder.")
    return membership


def _target(actor: Actor, ref) -> Membership:
    if isinstance(ref, Membership):
        ref = ref.pk
    if ref is None or (isinstance(ref, str) and not ref.strip()):
        raise invalid("into", "into names the member (id or e-mail) the placeholder merges into.")
    text = str(ref).strip()
    members = Membership.objects.select_related("user").filter(org_id=actor.org.pk)
    if text.isascii() and text.isdigit() and len(text) < 19:
        membership = members.filter(pk=int(text)).first()
    else:
        membership = members.filter(user__email__iexact=text).first()
    if membership is None:
        raise invalid("into", f"{text[:80]!r} is not a member of this org.")
    if membership.is_placeholder or membership.status != Membership.Status.ACTIVE:
        raise invalid("into", "A placeholder merges into an active member, not another placeholder or a former member.")
    return membership


def _move(actor: Actor, placeholder: Membership, target: Membership, verb: str, unit) -> dict:
    old, new = placeholder.user_id, target.user_id
    org_id = actor.org.pk
    moved = {"lanes": 0}
    for issue in (
        Issue.objects.select_for_update(no_key=True, of=("self",))
        .select_related("project")
        .filter(org_id=org_id, assignee_id=old)
        .order_by("pk")
    ):
        Issue.objects.filter(pk=issue.pk).update(assignee_id=new, updated_at=timezone.now())
        unit.record("updated", issue=issue, changes={"assignee": [old, new]})
        moved["lanes"] += 1
    moved["authored"] = Issue.objects.filter(org_id=org_id, author_id=old).update(author_id=new)
    Issue.objects.filter(org_id=org_id, submitted_by_id=old).update(submitted_by_id=new)
    moved["comments"] = Comment.objects.filter(org_id=org_id, author_id=old).update(author_id=new)
    Comment.objects.filter(org_id=org_id, retracted_by_id=old).update(retracted_by_id=new)
    moved["checkpoints"] = Checkpoint.objects.filter(org_id=org_id, author_id=old).update(author_id=new)
    moved["attachments"] = Attachment.objects.filter(org_id=org_id, created_by_id=old).update(created_by_id=new)
    # A later re-import maps the same upstream person to the member directly.
    ImportedRecord.objects.filter(org_id=org_id, kind="person", object_id=str(old)).update(object_id=str(new))
    placeholder.status = Membership.Status.RETIRED
    placeholder.save(update_fields=["status"])
    unit.record(
        verb,
        changes={
            "placeholder": {"memberId": placeholder.pk, "userId": old, "name": placeholder.user.get_full_name()},
            "into": {"memberId": target.pk, "userId": new, "email": target.user.email},
            "moved": moved,
        },
    )
    return moved


def placeholder_claim(*, actor: Actor, placeholder) -> Membership:
    """A member claims the placeholder that stands for them: allowed when its recorded
    upstream address is the member's own verified address."""
    if actor.principal_id is None or actor.membership is None:
        raise ServiceError("FORBIDDEN", "Only a member can claim a placeholder.")
    me = Membership.objects.select_related("user").get(pk=actor.membership.pk)
    if me.status != Membership.Status.ACTIVE:
        raise ServiceError("FORBIDDEN", "Only an active member can claim a placeholder.")
    with mutation(actor, "placeholder_claim", charge=False) as unit:
        ph = _placeholder(actor, placeholder)
        email = (me.user.email or "").strip().lower()
        if not ph.upstream_email or ph.upstream_email.lower() != email or not email_verified(user=me.user):
            raise ServiceError(
                "FORBIDDEN",
                "This placeholder's address at its source is not your verified address; an owner can merge it instead.",
                tell_human="Ask an owner to merge the placeholder into you.",
            )
        _move(actor, ph, me, "placeholder_claimed", unit)
    return me


def placeholder_merge(*, actor: Actor, placeholder, into) -> Membership:
    """An owner merges a placeholder into a member (by member id or e-mail)."""
    owner_admin_only(actor)
    with mutation(actor, "placeholder_merge", charge=False) as unit:
        ph = _placeholder(actor, placeholder)
        target = _target(actor, into)
        _move(actor, ph, target, "placeholder_merged", unit)
    return target
