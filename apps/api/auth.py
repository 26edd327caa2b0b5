"""Who is calling /api/v1/: a bearer agent key, or a signed-in human's session.

Both resolve to an ``Actor`` carried as ``request.auth``. Every authentication failure
answers the same UNAUTHORIZED (no hint whether a key exists, is revoked or retired).
"""

from __future__ import annotations

import logging

from django.conf import settings
from rest_framework import authentication, exceptions, permissions, throttling

from apps.core.errors import ServiceError
from apps.orgs.actor import Actor
from apps.orgs.selectors import human_org
from apps.orgs.services import actor_for_human, agent_key_authenticate

ORG_HEADER = "X-Retasc-Org"


log = logging.getLogger(__name__)


class BearerKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer rtsc_…``. Any Authorization header must be a valid key."""

    def authenticate(self, request):
        header = request.headers.get("Authorization")
        if header is None:
            return None
        scheme, _, raw = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise exceptions.AuthenticationFailed()
        try:
            actor = agent_key_authenticate(raw.strip())
        except ServiceError:
            raise exceptions.AuthenticationFailed() from None
        return actor.key.user, actor

    def authenticate_header(self, request):
        return 'Bearer realm="retasc"'


class SessionOrgAuthentication(authentication.SessionAuthentication):
    """A signed-in human (CSRF enforced on writes), acting in one of their orgs.

    The org is named by the ``X-Retasc-Org: <slug>`` header, else the org of their first
    active membership.
    """

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        user = result[0]
        org = human_org(user=user, org_slug=request.headers.get(ORG_HEADER))
        if org is None:
            raise exceptions.AuthenticationFailed()
        return user, actor_for_human(user=user, org=org)  # NOT_FOUND unless an active member


class HasActor(permissions.BasePermission):
    def has_permission(self, request, view):
        if isinstance(request.auth, Actor):
            return True
        raise exceptions.NotAuthenticated()


class KeyRateThrottle(throttling.SimpleRateThrottle):
    """``RETASC_API_RATE`` requests per agent key (or per signed-in user)."""

    scope = "api"
    cache_format = "retasc:api-rate:%(ident)s"

    def get_rate(self):
        return settings.RETASC_API_RATE

    def allow_request(self, request, view):
        # Fail open: the limiter's store (Redis when configured) being down must not take
        # the work loop down with it. Requests pass unthrottled until it is back.
        try:
            return super().allow_request(request, view)
        except Exception as exc:  # redis.ConnectionError, TimeoutError, ...
            log.warning("rate limiter unavailable (%s); allowing the request", type(exc).__name__)
            return True

    def get_cache_key(self, request, view):
        actor = request.auth
        if not isinstance(actor, Actor):
            return None
        # A session key spends its parent's budget (SPEC §2): one key plus its sessions
        # share one rate.
        ident = f"key:{actor.limit_key_id}" if actor.key_id else f"user:{actor.principal_id}"
        return self.cache_format % {"ident": ident}
