"""/invite/<code>/: sign in or sign up, then join the org with a single-use code."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from apps.accounts.session import SESSION_INVITE, SESSION_ORG
from apps.core.errors import ServiceError
from apps.orgs.services import invite_redeem


@require_http_methods(["GET", "POST"])
def invite(request, code: str):
    here = reverse("dash:invite", args=[code])
    if not request.user.is_authenticated:
        # Remember the code through sign-up: the new person joins this org instead of
        # getting an org of their own first.
        request.session[SESSION_INVITE] = code
        next_q = urlencode({"next": here})
        return render(
            request,
            "dash/invite.html",
            {
                "code": code,
                "signup_url": f"{reverse('account_signup')}?{next_q}",
                "login_url": f"{reverse('account_login')}?{next_q}",
            },
        )
    if request.method == "GET":
        return render(request, "dash/invite.html", {"code": code})
    if request.POST.get("decline"):
        request.session.pop(SESSION_INVITE, None)
        return redirect("dash:home")
    try:
        membership = invite_redeem(code=code, user=request.user)
    except ServiceError as exc:
        if exc.code != "FORBIDDEN":  # an unverified address keeps the invite for later
            request.session.pop(SESSION_INVITE, None)
        return render(request, "dash/invite.html", {"code": code, "error": exc}, status=exc.http_status)
    request.session.pop(SESSION_INVITE, None)
    request.session[SESSION_ORG] = str(membership.org_id)
    messages.success(request, _("Welcome to %(org)s.") % {"org": membership.org.name})
    return redirect("dash:queue")
