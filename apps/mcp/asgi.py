"""The /mcp mount, composed for ``retasc.asgi`` (STYLE §12).

``mcp_application()`` builds, outermost first: ``UnauthorizedAsJSON`` (one refusal for
every authentication failure) -> ``LifespanlessMCP`` (starts the session manager on the
first request, stops it on reactor shutdown) -> the SDK's Starlette app (host/origin
check, body size limit, bearer auth, the stateless streamable-HTTP transport).

``route_mcp(mcp_app, fallback)`` sends ``/mcp`` (and anything under it) to the MCP app and
every other HTTP request to ``fallback`` (Django). Paths are kept whole: the SDK's route
is the full ``/mcp``.
"""

from __future__ import annotations

from django.conf import settings

from apps.mcp.auth import UnauthorizedAsJSON
from apps.mcp.lifespan import LifespanlessMCP
from apps.mcp.oauth import OAUTH_PATHS
from apps.mcp.server import MCP_PATH, build_app, build_server


def mcp_application():
    server = build_server()
    app = build_app(server)
    return UnauthorizedAsJSON(
        LifespanlessMCP(app, server.session_manager),
        anonymous_discovery=settings.RETASC_MCP_ANONYMOUS_DISCOVERY,
    )


def is_mcp_path(path: str) -> bool:
    """/mcp, and the OAuth endpoints the MCP SDK serves beside it (apps.mcp.oauth)."""
    if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
        return True
    return any(path == p or path.startswith(p + "/") for p in OAUTH_PATHS)


def route_mcp(mcp_app, fallback):
    async def router(scope, receive, send):
        if scope["type"] == "http" and is_mcp_path(scope.get("path", "")):
            return await mcp_app(scope, receive, send)
        return await fallback(scope, receive, send)

    return router
