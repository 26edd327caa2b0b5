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

import json

from django.conf import settings

from apps.mcp.auth import UnauthorizedAsJSON
from apps.mcp.lifespan import LifespanlessMCP
from apps.mcp.oauth import OAUTH_PATHS
from apps.mcp.server import MCP_PATH, build_app, build_server


def mcp_application():
    server = build_server()
    app = build_app(server)
    return no_get_stream(
        UnauthorizedAsJSON(
            LifespanlessMCP(app, server.session_manager),
            anonymous_discovery=settings.RETASC_MCP_ANONYMOUS_DISCOVERY,
        )
    )


def is_mcp_path(path: str) -> bool:
    """/mcp, and the OAuth endpoints the MCP SDK serves beside it (apps.mcp.oauth)."""
    if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
        return True
    return any(path == p or path.startswith(p + "/") for p in OAUTH_PATHS)


_NO_STREAM = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "Method Not Allowed: this server is stateless and opens no notification stream; send requests as POST.",
        },
    }
).encode()


def no_get_stream(app):
    """GET /mcp would open the transport's server-to-client stream, which a stateless
    server never writes to: the client would wait forever. Answer 405 at once, in the
    same JSON the transport gives a DELETE."""

    async def wrapper(scope, receive, send):
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path", "").rstrip("/") == MCP_PATH:
            headers = [
                (b"content-type", b"application/json"),
                (b"allow", b"POST"),
                (b"content-length", str(len(_NO_STREAM)).encode()),
            ]
            await send({"type": "http.response.start", "status": 405, "headers": headers})
            await send({"type": "http.response.body", "body": _NO_STREAM})
            return
        return await app(scope, receive, send)

    return wrapper


def route_mcp(mcp_app, fallback):
    async def router(scope, receive, send):
        if scope["type"] == "http" and is_mcp_path(scope.get("path", "")):
            return await mcp_app(scope, receive, send)
        return await fallback(scope, receive, send)

    return router
