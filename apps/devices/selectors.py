"""Reads for the CLI's human endpoints: a person's orgs, and the agent keys they may manage."""

from __future__ import annotations

from django.db.models import Count, Q

from apps.core.errors import not_found
from apps.core.formats import iso
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Invite, Membership


def orgs_for_user(*, user) -> list[dict]:
    """Every org the person is an active member of, with its projects (one query each)."""
    memberships = list(
        Membership.objects.filter(user=user, status=Membership.Status.ACTIVE, org__deleted_at__isnull=True)
        .select_related("org")
        .prefetch_related("org__projects")
        .order_by("created_at", "pk")
    )
    return [
        {
            "slug": m.org.slug,
            "name": m.org.name,
            "role": m.role,
            "projects": [{"prefix": p.prefix, "name": p.name} for p in sorted(m.org.projects.all(), key=lambda p: p.prefix)],
        }
        for m in memberships
    ]


def me(*, user, token=None) -> dict:
    return {
        "email": user.email,
        "name": user.get_full_name() or user.email,
        "token": {"prefix": token.prefix, "label": token.label, "createdAt": iso(token.created_at)} if token else None,
        "orgs": orgs_for_user(user=user),
    }


def key_shape(key: AgentKey, sessions: int = 0) -> dict:
    return {
        "id": key.pk,
        "prefix": key.prefix,
        "runtime": key.runtime,
        "label": key.label,
        "admin": key.admin,
        "project": key.project.prefix,
        "owner": key.user.email,
        "sessions": sessions,
        "createdAt": iso(key.created_at),
        "lastUsedAt": iso(key.last_used_at),
        "revokedAt": iso(key.revoked_at),
        "status": "revoked" if key.revoked_at else "live",
    }


def keys_list(*, actor: Actor, include_revoked: bool = False) -> list[dict]:
    """Agent keys (not session keys): an owner sees the org's, a member their own."""
    qs = AgentKey.objects.filter(org_id=actor.org.pk, parent__isnull=True).select_related("user", "project")
    if not actor.is_owner:
        qs = qs.filter(user_id=actor.principal_id)
    if not include_revoked:
        qs = qs.filter(revoked_at__isnull=True)
    qs = qs.annotate(n_sessions=Count("session_keys", filter=Q(session_keys__revoked_at__isnull=True)))
    return [key_shape(k, k.n_sessions) for k in qs.order_by("-created_at", "-pk")[:500]]


def key_resolve(*, actor: Actor, ref) -> int:
    """A key named by its id or its visible prefix (``rtsc_ab12cd34``) -> its id."""
    ref = str(ref or "").strip()
    if ref.isdigit():
        return int(ref)
    pk = AgentKey.objects.filter(org_id=actor.org.pk, prefix=ref).values_list("pk", flat=True).first()
    if pk is None:
        raise not_found(f"Key {ref}")
    return pk


def invite_resolve(*, actor: Actor, ref) -> int:
    """An invite named by its id or the visible start of its code -> its id."""

    ref = str(ref or "").strip()
    if ref.isdigit():
        return int(ref)
    ids = list(Invite.objects.filter(org_id=actor.org.pk, prefix=ref[:14]).values_list("pk", flat=True)[:2]) if ref else []
    if len(ids) != 1:
        raise not_found(f"Invite {ref}")
    return ids[0]
