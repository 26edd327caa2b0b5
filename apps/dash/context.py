"""Request plumbing for Dash views: sign-in, the current org, the actor, errors."""

from __future__ import annotations

import functools
import zoneinfo

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, render, resolve_url
from django.utils import timezone
from django_htmx.http import HttpResponseClientRedirect

from apps.accounts.session import SESSION_INVITE, current_org, memberships_of
from apps.billing.selectors import billing_banner
from apps.core.errors import ServiceError
from apps.orgs.services import actor_for_human


def dash_view(view):
    """Signed-in only; sets ``request.actor`` (runtime ``dash``) for the current org.

    A ServiceError that escapes the view renders the error page with its HTTP status.
    """

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            if getattr(request, "htmx", False):
                return HttpResponseClientRedirect(resolve_url(settings.LOGIN_URL))
            return redirect_to_login(request.get_full_path())
        try:
            # An unverified address acts in no org (FORBIDDEN, with how to verify).
            org = current_org(request)
            if org is None:
                return redirect("dash:invite", code=request.session[SESSION_INVITE])
            request.actor = actor_for_human(user=request.user, org=org)
        except ServiceError as exc:
            return error_response(request, exc)
        try:
            timezone.activate(zoneinfo.ZoneInfo(org.timezone))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            timezone.activate(zoneinfo.ZoneInfo("UTC"))
        try:
            return view(request, *args, **kwargs)
        except ServiceError as exc:
            return error_response(request, exc)

    return wrapper


def error_response(request, exc: ServiceError, *, template: str = "dash/error.html", context: dict | None = None):
    ctx = {"error": exc, **(context or {})}
    return render(request, template, ctx, status=exc.http_status)


def dash(request) -> dict:
    """Template context for every page: the org switcher, the role, the live socket."""
    actor = getattr(request, "actor", None)
    if actor is None:
        return {"live_url": None}
    return {
        "actor": actor,
        "org": actor.org,
        "is_owner": actor.is_owner,
        "my_orgs": memberships_of(request.user),
        "live_url": "/ws/org/",
        # Owners see why agents are refused when billing blocks (no query: the org row
        # is already loaded, prices are cached).
        "billing_banner": billing_banner(actor=actor),
    }
