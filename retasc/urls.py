from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path

from apps.devices.views import device as device_view
from apps.hooks import stripe as stripe_hook
from apps.mcp.views import well_known_mcp
from retasc.health import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/health", health, name="health"),
    path("api/v1/", include("apps.devices.urls")),  # /api/v1/cli/... and /api/v1/export (before the API catch-all)
    path("api/", include("apps.api.urls")),
    path(
        ".well-known/mcp.json", well_known_mcp, name="mcp-well-known"
    ),  # /api/v1/, /api/schema/, /api/docs/; JSON 404 for the rest of /api/
    path("accounts/", include("allauth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("device/", device_view, name="device"),
    path(
        "hooks/stripe", stripe_hook.webhook, name="hook-stripe"
    ),  # card top-ups and refunds  # retasc login: approve a CLI sign-in
    path("", include("apps.dash.urls")),  # the Dash (HTML); keep last
]


def _not_found(request, exception=None):
    return JsonResponse({"code": "NOT_FOUND", "message": "No such page."}, status=404)


handler404 = _not_found
