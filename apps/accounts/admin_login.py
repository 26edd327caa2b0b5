"""The Django admin's sign-in, throttled like allauth's (``ACCOUNT_RATE_LIMITS``).

Django's admin login has no throttling of its own; it shares allauth's counters for
failed sign-ins (``login_failed``: per client address and per account name), so the
admin is no side door for guessing a password the front door would have stopped. A
throttled attempt is refused before the password is checked, right or wrong.
"""

from __future__ import annotations

from allauth.core import ratelimit
from django.contrib import admin

ACTION = "login_failed"


def _key(request) -> str:
    return "admin:" + (request.POST.get("username") or "").strip().lower()


def admin_login(request, extra_context=None):
    if request.method != "POST":
        return admin.site.login(request, extra_context)
    if not ratelimit.consume(request, action=ACTION, key=_key(request), dry_run=True):
        return ratelimit.respond_429(request)
    response = admin.site.login(request, extra_context)
    if not (request.user.is_authenticated and request.user.is_staff) and response.status_code == 200:
        # The form came back: a failed attempt, counted.
        ratelimit.consume(request, action=ACTION, key=_key(request))
    return response
