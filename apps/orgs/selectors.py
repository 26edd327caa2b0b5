"""Reads over orgs, members and projects, shaped for every interface."""

from __future__ import annotations

from allauth.account.models import EmailAddress
from django.db.models import Count, Q
from django.utils import timezone

from apps.core import inputs
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.formats import iso
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Invite, Membership, Org, Project, SavedFilter


def email_verified(*, user) -> bool:
    """Whether the account's own e-mail address (the one it is known by) is verified."""
    email = (getattr(user, "email", "") or "").strip()
    return bool(email) and EmailAddress.objects.filter(user_id=user.pk, email__iexact=email, verified=True).exists()


def whoami(*, actor: Actor) -> dict:
    membership = actor.membership
    user = membership.user if membership else None
    return {
        "principal": {
            "email": user.email if user else None,
            "name": (user.get_full_name() or user.email) if user else None,
            "role": membership.role if membership else None,
            "memberId": membership.pk if membership else None,
        },
        "runtime": actor.runtime,
        "key": {
            "label": actor.key.label,
            "prefix": actor.key.prefix,
            "session": actor.key.parent_id is not None,
            "admin": actor.key.admin,
        }
        if actor.key
        else None,
        "org": {"slug": actor.org.slug, "name": actor.org.name},
        "project": {"prefix": actor.project.prefix, "name": actor.project.name} if actor.project else None,
    }


def member_shape(m: Membership, live_keys: int = 0) -> dict:
    return {
        "memberId": m.pk,
        "email": m.user.email,
        "name": m.user.get_full_name() or m.user.email,
        "role": m.role,
        "status": m.status,
        "placeholder": m.status == Membership.Status.PLACEHOLDER,
        "liveKeys": live_keys,
        "joinedAt": iso(m.created_at),
    }


def members_list(*, actor: Actor, query: str | None = None) -> list[dict]:
    qs = Membership.objects.filter(org_id=actor.org.pk).select_related("user").order_by("user__email")
    if query:
        if not isinstance(query, str) or len(query) > 200:
            raise invalid("query", "query is text up to 200 characters.")
        query = inputs.clean(query, "query")
        qs = qs.filter(
            Q(user__email__icontains=query) | Q(user__first_name__icontains=query) | Q(user__last_name__icontains=query)
        )
    keys = dict(
        AgentKey.objects.live().filter(org_id=actor.org.pk).values("user_id").annotate(n=Count("pk")).values_list("user_id", "n")
    )
    return [member_shape(m, keys.get(m.user_id, 0)) for m in qs]


def project_shape(p: Project, counts: dict | None = None) -> dict:
    return {"prefix": p.prefix, "name": p.name, "issues": p.issue_seq, "createdAt": iso(p.created_at), **(counts or {})}


def projects_list(*, actor: Actor) -> list[dict]:
    return [project_shape(p) for p in Project.objects.filter(org_id=actor.org.pk).order_by("prefix")]


def invites_list(*, actor: Actor) -> list[dict]:
    """The org's invites with their status. Owners only: members never see them."""
    if not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner can manage invites.", tell_human="Ask an owner of the org.")
    now = timezone.now()
    return [
        {
            "id": i.pk,
            "prefix": i.prefix,
            "role": i.role,
            "status": i.status_at(now),
            "createdAt": iso(i.created_at),
            "expiresAt": iso(i.expires_at),
            "acceptedBy": i.accepted_by.email if i.accepted_by_id else None,
            "createdBy": i.created_by.email if i.created_by_id else None,
        }
        for i in Invite.objects.filter(org_id=actor.org.pk).select_related("accepted_by", "created_by").order_by("-created_at")
    ]


def human_org(*, user, org_slug: str | None = None):
    """The org a signed-in human acts in: the one named (``X-Retasc-Org``), else their
    first active membership's. ``None`` when they belong to no org yet; an unknown slug
    is NOT_FOUND. (Membership of the named org is checked by ``actor_for_human``.)"""
    if org_slug:
        org = Org.objects.filter(slug=org_slug.strip(), deleted_at__isnull=True).first()
        if org is None:
            raise not_found("Org")
        return org
    membership = (
        Membership.objects.select_related("org")
        .filter(user=user, status=Membership.Status.ACTIVE, org__deleted_at__isnull=True)
        .order_by("created_at", "pk")
        .first()
    )
    return membership.org if membership else None


def human_resolve(*, actor: Actor, ref, field: str, allow_none: bool = False) -> int | None:
    """A human of the org named by e-mail, member id, ``me`` (or ``none``): their user id."""
    if ref is None or (isinstance(ref, str) and ref.strip().lower() in ("", "none")):
        if allow_none:
            return None
        raise invalid(field, f"{field} must name a person.")
    text = inputs.ref(ref, field)
    if text.lower() == "me":
        if actor.principal_id is None:
            raise invalid(field, "'me' needs a person.")
        return actor.principal_id
    members = Membership.objects.filter(org_id=actor.org.pk)
    if text.isascii() and text.isdigit() and len(text) < 19:  # a member id (a bigint)
        membership = members.filter(pk=int(text)).first()
    else:
        membership = members.filter(user__email__iexact=text).first()
    if membership is None:
        raise invalid(field, f"{inputs.brief(text)!r} is not a member of this org.")
    if field == "assignee" and membership.status == Membership.Status.PLACEHOLDER:
        raise invalid(field, f"{inputs.brief(text)!r} is a placeholder for an outside author; it has no lane.")
    return membership.user_id


def saved_filters_for(*, actor: Actor) -> list[SavedFilter]:
    """The acting member's saved filters, by name. Nobody else's: not even an owner's view."""
    if actor.principal_id is None:
        return []
    return list(SavedFilter.objects.filter(org_id=actor.org.pk, user_id=actor.principal_id).order_by("name"))
