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

import logging
from urllib.parse import urlsplit

from django.conf import settings
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata

from apps.mcp import exchange
from apps.mcp.auth import AgentKeyVerifier
from apps.mcp.oauth import RetascOAuthProvider
from apps.mcp.tools import build_tools

log = logging.getLogger(__name__)

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


def oauth_enabled() -> bool:
    """OAuth needs an issuer URL that is https or loopback (RFC 8414; the SDK checks it)."""
    if not settings.RETASC_MCP_OAUTH:
        return False
    public = urlsplit(settings.PUBLIC_URL)
    if public.scheme == "https" or public.hostname in ("localhost", "127.0.0.1", "::1"):
        return True
    log.warning("MCP OAuth is off: RETASC_PUBLIC_URL is not https; bearer keys still work")
    return False


def build_server() -> MCPServer:
    anonymous = settings.RETASC_MCP_ANONYMOUS_DISCOVERY
    if oauth_enabled():
        # Bearer keys and OAuth-issued tokens are both agent keys: the provider verifies
        # them with the same AgentKeyVerifier.
        auth = AuthSettings(
            issuer_url=settings.PUBLIC_URL,
            resource_server_url=f"{settings.PUBLIC_URL}{MCP_PATH}",
            validate_token_resource=False,  # one resource per deployment; tokens are its keys
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
        )
        verifier = {"auth_server_provider": RetascOAuthProvider(anonymous_discovery=anonymous)}
    else:
        auth = AuthSettings(issuer_url=settings.PUBLIC_URL, resource_server_url=None)
        verifier = {"token_verifier": AgentKeyVerifier(anonymous_discovery=anonymous)}
    server = MCPServer(
        "retasc",
        title="Retasc",
        version=settings.VERSION,
        instructions=INSTRUCTIONS,
        website_url=settings.PUBLIC_URL,
        tools=build_tools(),
        auth=auth,
        log_level="WARNING",
        **verifier,
    )
    if auth.resource_server_url is not None:
        # RFC 9728 puts the metadata at /.well-known/oauth-protected-resource/mcp (the SDK
        # serves it); some clients look at the bare path first: the same document there.
        handler = ProtectedResourceMetadataHandler(
            ProtectedResourceMetadata(resource=auth.resource_server_url, authorization_servers=[auth.issuer_url])
        )
        server.custom_route("/.well-known/oauth-protected-resource", methods=["GET", "OPTIONS"])(handler.handle)
    return server


def build_app(server: MCPServer):
    """The SDK's Starlette app for /mcp (creates ``server.session_manager``); its
    handshake-era POSTs are served one exchange each (``apps.mcp.exchange``)."""
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.RETASC_MCP_MAX_BODY_BYTES,
        transport_security=transport_security(),
    )
    if settings.RETASC_MCP_SINGLE_EXCHANGE:
        exchange.install(server.session_manager)
    return app
