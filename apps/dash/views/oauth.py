"""/oauth/consent: a signed-in human approves an MCP client and picks org and project.

The SDK's /authorize (apps.mcp.oauth) checked the client, the redirect URI and the PKCE
challenge and sent the browser here with the request signed. Approving writes a
single-use code and sends the browser back to the client; denying sends it back with
``error=access_denied``. Nothing is written before the approval.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from apps.core.errors import ServiceError
from apps.dash.context import error_response
from apps.dash.views.common import field, no_store
from apps.orgs import oauth


class _ClientRedirect(HttpResponseRedirect):
    # The client's redirect URI may be any scheme it registered (http loopback, a custom
    # app scheme): the SDK validated it against the registration.
    def __init__(self, url: str):
        self.allowed_schemes = ["http", "https", url.split(":", 1)[0].lower()]
        super().__init__(url)


@require_http_methods(["GET", "POST"])
def consent(request):
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    signed = request.GET.get("request") or request.POST.get("request") or ""
    try:
        auth_request = oauth.consent_request_load(signed)
    except ServiceError as exc:
        return error_response(request, exc)
    choices = oauth.consent_choices(user=request.user)
    context = {
        "client": auth_request["client"],
        "redirect_uri": auth_request["redirect_uri"],
        "signed": signed,
        "choices": choices,
    }
    if request.method == "GET":
        return no_store(render(request, "dash/oauth_consent.html", context))
    if request.POST.get("decision") != "approve":
        return _ClientRedirect(oauth.consent_deny(request=auth_request))
    org_id, _, project_id = field(request, "target").partition(":")
    try:
        url = oauth.consent_approve(user=request.user, request=auth_request, org_id=org_id or None, project_id=project_id)
    except ServiceError as exc:
        return no_store(render(request, "dash/oauth_consent.html", {**context, "error": exc}, status=exc.http_status))
    return _ClientRedirect(url)
