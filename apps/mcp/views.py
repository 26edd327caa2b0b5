"""``/.well-known/mcp.json``: where the MCP endpoint is and how to authenticate to it."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from apps.mcp.server import MCP_PATH, oauth_enabled
from apps.tools.operations import TOOLS


@require_GET
def well_known_mcp(request):
    base = settings.PUBLIC_URL
    return JsonResponse(
        {
            "name": "retasc",
            "title": "Retasc",
            "version": settings.VERSION,
            "url": f"{base}{MCP_PATH}",
            "transport": "streamable-http",
            "sessions": "stateless",
            "auth": {
                "type": "bearer",
                "header": "Authorization",
                "scheme": "Bearer",
                "keyPrefix": "rtsc_",
                "obtain": "retasc bind, or the Dash (Agent keys)",
                "oauth": oauth_enabled(),  # MCP authorization: /.well-known/oauth-protected-resource
            },
            "tools": list(TOOLS),
        },
        headers={"Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"},
    )
