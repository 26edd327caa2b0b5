"""The MCPServer and its streamable-HTTP ASGI app, configured from Django settings.

Sessions across several Daphne processes: the transport runs **stateless**
(``stateless_http=True``). Every POST to /mcp is authenticated and answered on its own;
no ``Mcp-Session-Id`` is handed out, so a load balancer may send consecutive requests of
one agent to any process, with no sticky routing and nothing lost when a process
restarts. What that gives up is server-to-client requests (sampling, elicitation) and
the standalone GET notification stream, which Retasc's tools do not use: all the state a
tool needs (claims, leases, checkpoints) lives in the database, keyed by claim tokens.
Clients that speak protocol 2026-07-28 are sessionless anyway.

The JSON answer mode (``json_response=True``) returns one ``application/json`` body per
POST instead of an SSE stream: simpler for proxies, and no tool streams progress.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from apps.mcp.auth import AgentKeyVerifier
from apps.mcp.tools import build_tools

MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "Retasc work queue. Loop: next_issue -> work -> heartbeat/checkpoint while working -> save_issue "
    "status done (with evidence) or review (assignee + checkpoint), or release_issue. Pass claimToken on "
    "writes to a claimed issue. Refusals are JSON {code, message, tellHuman?}; relay tellHuman to a human."
)


def transport_security() -> TransportSecuritySettings:
    """DNS-rebinding protection from ``ALLOWED_HOSTS`` (the SDK only allows loopback by default).

    ``"*"`` turns the check off (as it does for Django). A Django subdomain pattern
    (``.example.com``) allows the bare domain only: the SDK matches hosts exactly.
    """
    hosts = [h.lstrip(".") for h in settings.ALLOWED_HOSTS if h]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    allowed_hosts, origins = [], []
    for host in hosts:
        allowed_hosts += [host, f"{host}:*"]
        origins += [f"http://{host}", f"https://{host}", f"http://{host}:*", f"https://{host}:*"]
    public = urlsplit(settings.PUBLIC_URL)
    if public.netloc:
        origins.append(f"{public.scheme}://{public.netloc}")
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=origins)


def build_server() -> MCPServer:
    return MCPServer(
        "retasc",
        title="Retasc",
        version=settings.VERSION,
        instructions=INSTRUCTIONS,
        website_url=settings.PUBLIC_URL,
        tools=build_tools(),
        token_verifier=AgentKeyVerifier(anonymous_discovery=settings.RETASC_MCP_ANONYMOUS_DISCOVERY),
        # Bearer keys only: no resource_server_url, so no OAuth protected-resource metadata.
        auth=AuthSettings(issuer_url=settings.PUBLIC_URL, resource_server_url=None),
        log_level="WARNING",
    )


def build_app(server: MCPServer):
    """The SDK's Starlette app for /mcp (creates ``server.session_manager``)."""
    return server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.RETASC_MCP_MAX_BODY_BYTES,
        transport_security=transport_security(),
    )
