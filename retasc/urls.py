from django.contrib import admin
from django.http import HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from apps.accounts.admin_login import admin_login
from apps.devices.views import device as device_view
from apps.hooks import stripe as stripe_hook
from apps.mcp.views import well_known_mcp
from apps.ops.views import metrics_view
from retasc.health import health

urlpatterns = [
    path("admin/login/", admin_login, name="admin-login"),  # throttled like /accounts/ (before admin/)
    path("admin/", admin.site.urls),
    path("api/health", health, name="health"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus text, token or loopback only
    path("api/v1/", include("apps.devices.urls")),  # /api/v1/cli/... and /api/v1/export (before the API catch-all)
    path("api/", include("apps.api.urls")),
    path(
        ".well-known/mcp.json", well_known_mcp, name="mcp-well-known"
    ),  # /api/v1/, /api/schema/, /api/docs/; JSON 404 for the rest of /api/
    path("hooks/stripe", stripe_hook.webhook, name="hook-stripe"),  # card top-ups and refunds
    path("hooks/", include("apps.hooks.urls")),  # inbound webhooks (signature-verified, no session)
    path("accounts/", include("allauth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("device/", device_view, name="device"),
    path(
        "favicon.ico", RedirectView.as_view(url=static("dash/favicon.svg"), permanent=True)
    ),  # retasc login: approve a CLI sign-in
    path("", include("apps.dash.urls")),  # the Dash (HTML); keep last
]


def _wants_json(request) -> bool:
    # Machines (the API, MCP, the CLI) get JSON; people in a browser get a page.
    path = request.path
    return path.startswith(("/api/", "/mcp", "/hooks/", "/.well-known/")) or "text/html" not in request.headers.get("Accept", "")


def _not_found(request, exception=None):
    if _wants_json(request):
        return JsonResponse({"code": "NOT_FOUND", "message": "No such page."}, status=404)
    return render(request, "404.html", status=404)


def _server_error(request):
    if _wants_json(request):
        return JsonResponse({"code": "INTERNAL", "message": "The server failed on this request; it was logged."}, status=500)
    # No template context processors here: the failure may be in the database they read.
    return HttpResponseServerError(loader.get_template("500.html").render({}))


handler404 = _not_found
handler500 = _server_error
