"""``Authorization: Bearer rtscpat_…``: the CLI acting as its signed-in human.

``PersonalTokenAuthentication`` yields the human's ``Actor`` (runtime ``cli``) in the org
named by ``X-Retasc-Org: <slug>``, else the org of their first active membership. It
answers ``None`` for any other Authorization value, so it sits in front of the agent-key
authentication without changing what that one accepts or refuses.
``PersonalTokenUserAuthentication`` yields just the user (``request.auth`` is the token):
for the few endpoints that work before the person belongs to any org (list or create
orgs, redeem an invite).
"""

from __future__ import annotations

import dataclasses

from rest_framework import authentication, exceptions, permissions

from apps.core.errors import ServiceError
from apps.devices.models import PersonalToken
from apps.devices.services import TOKEN_PREFIX, personal_token_authenticate
from apps.orgs.actor import Actor
from apps.orgs.selectors import human_org
from apps.orgs.services import actor_for_human

ORG_HEADER = "X-Retasc-Org"
CLI_RUNTIME = "cli"


def _bearer_token(request) -> str | None:
    header = request.headers.get("Authorization")
    if not header:
        return None
    scheme, _, raw = header.strip().partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw.startswith(TOKEN_PREFIX):
        return None
    return raw


def human_actor(*, user, org_slug: str | None) -> Actor:
    """The human's actor in the named org, else in their first active org."""

    org = human_org(user=user, org_slug=org_slug)
    if org is None:
        raise ServiceError(
            "NOT_FOUND",
            "You are not a member of any org yet.",
            tell_human="Create one (retasc bind --create) or join with an invite (retasc join CODE).",
        )
    return dataclasses.replace(actor_for_human(user=user, org=org), runtime=CLI_RUNTIME)


class PersonalTokenUserAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        raw = _bearer_token(request)
        if raw is None:
            return None
        try:
            token = personal_token_authenticate(raw)
        except ServiceError:
            raise exceptions.AuthenticationFailed() from None
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="retasc"'


class PersonalTokenAuthentication(PersonalTokenUserAuthentication):
    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        user, token = result
        request._request.retasc_personal_token = token
        return user, human_actor(user=user, org_slug=request.headers.get(ORG_HEADER))


class IsHuman(permissions.BasePermission):
    """A signed-in human (personal token or session), never an agent key."""

    def has_permission(self, request, view):
        if request.user is None or not getattr(request.user, "is_authenticated", False):
            raise exceptions.NotAuthenticated()
        if isinstance(request.auth, Actor) and request.auth.key is not None:
            raise exceptions.PermissionDenied("Agent keys cannot do this; sign in with retasc login.")
        return True


class HasHumanActor(IsHuman):
    def has_permission(self, request, view):
        super().has_permission(request, view)
        if not isinstance(request.auth, Actor):
            raise exceptions.NotAuthenticated()
        return True


def current_token(request) -> PersonalToken | None:
    auth = request.auth
    if isinstance(auth, PersonalToken):
        return auth
    return getattr(request._request, "retasc_personal_token", None)
