"""MCP authorization (OAuth 2.1) on /mcp: the SDK's authorization server, backed by Retasc.

The ``mcp`` SDK serves the protocol: protected-resource metadata (RFC 9728,
``/.well-known/oauth-protected-resource/mcp``), authorization-server metadata (RFC 8414,
``/.well-known/oauth-authorization-server``), dynamic client registration (``/register``),
the authorize request's checks (known client, registered redirect URI, PKCE challenge
required, S256 only), the token endpoint (client authentication, PKCE verification,
redirect URI match, code expiry) and ``/revoke``. ``RetascOAuthProvider`` answers the
SDK's questions with ``apps.orgs.oauth`` (the rules) and sends the human to the Dash's
consent page (``/oauth/consent``), which ends the authorize step.

Access tokens are agent keys (``rtsc_…``): the same verifier checks OAuth-issued tokens and
pasted bearer keys, so bearer keys keep working unchanged.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.conf import settings
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from apps.core.errors import ServiceError
from apps.leases.revocation import agent_key_revoke
from apps.mcp.auth import AgentKeyVerifier
from apps.mcp.db import database_turn
from apps.orgs import oauth

CONSENT_PATH = "/oauth/consent"
# Paths the SDK's auth routes answer (sent to the MCP app by ``apps.mcp.asgi``).
OAUTH_PATHS = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/authorize",
    "/token",
    "/register",
    "/revoke",
)


def _db(fn, *args, **kwargs):
    """Run an ORM call off the event loop, in one database turn."""

    def run():
        with database_turn():
            return fn(*args, **kwargs)

    return sync_to_async(run, thread_sensitive=False)()


def _client_info(client) -> OAuthClientInformationFull:
    data = dict(client.metadata)
    data["client_id"] = client.client_id
    if data.get("token_endpoint_auth_method", "client_secret_post") != "none":
        data["client_secret"] = oauth.client_secret(client.client_id)
    return OAuthClientInformationFull.model_validate(data)


class RetascOAuthProvider:
    """``mcp.server.auth.provider.OAuthAuthorizationServerProvider`` over ``apps.orgs.oauth``."""

    def __init__(self, *, anonymous_discovery: bool = False):
        self.verifier = AgentKeyVerifier(anonymous_discovery=anonymous_discovery)

    # --- clients -------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        client = await _db(oauth.client_get, client_id)
        return _client_info(client) if client else None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if not client_info.redirect_uris:
            raise RegistrationError("invalid_redirect_uri", "redirect_uris is required.")
        if client_info.client_secret is not None:
            # The secret is derived from the id, not stored; the SDK answers with this one.
            client_info.client_secret = oauth.client_secret(client_info.client_id)
        await _db(
            oauth.client_register,
            client_id=client_info.client_id,
            name=client_info.client_name or "MCP client",
            redirect_uris=[str(u) for u in client_info.redirect_uris],
            metadata=client_info.model_dump(mode="json", exclude_none=True),
        )

    # --- authorize: on to the Dash ---------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        signed = oauth.consent_request_sign(
            {
                "client_id": client.client_id,
                "redirect_uri": str(params.redirect_uri),
                "redirect_uri_provided_explicitly": params.redirect_uri_provided_explicitly,
                "code_challenge": params.code_challenge,
                "state": params.state,
                "scopes": params.scopes or [],
                "resource": params.resource,
            }
        )
        return f"{settings.PUBLIC_URL}{CONSENT_PATH}?{urlencode({'request': signed})}"

    # --- codes and tokens ---------------------------------------------------------------

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str):
        code = await _db(oauth.code_load, client_id=client.client_id, raw=authorization_code)
        if code is None:
            return None
        found = AuthorizationCode(
            code=authorization_code,
            scopes=code.scopes,
            expires_at=code.expires_at.timestamp(),
            client_id=client.client_id,
            code_challenge=code.code_challenge,
            redirect_uri=code.redirect_uri,
            redirect_uri_provided_explicitly=code.redirect_uri_explicit,
            resource=code.resource or None,
            subject=str(code.user_id),
        )
        found.__dict__["_row"] = code  # carried to the exchange (the SDK passes it back)
        return found

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, authorization_code) -> OAuthToken:
        try:
            tokens = await _db(oauth.code_exchange, code=authorization_code.__dict__["_row"])
        except ServiceError as exc:
            raise TokenError("invalid_grant", exc.message) from None
        return OAuthToken(**tokens)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str):
        grant = await _db(oauth.grant_for_refresh, client_id=client.client_id, raw=refresh_token)
        if grant is None:
            return None
        found = RefreshToken(
            token=refresh_token, client_id=client.client_id, scopes=grant.scopes, resource=grant.resource or None
        )
        found.__dict__["_row"] = grant
        return found

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token, scopes: list[str]) -> OAuthToken:
        try:
            tokens = await _db(oauth.refresh_exchange, grant=refresh_token.__dict__["_row"], raw=refresh_token.token)
        except ServiceError as exc:
            raise TokenError("invalid_grant", exc.message) from None
        return OAuthToken(**tokens)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = await self.verifier.verify_token(token)
        if found is not None and found.expires_at is None:
            found.expires_at = int(time.time()) + 60  # re-checked on every request anyway
        return found

    async def revoke_token(self, token) -> None:
        """Revoke the key behind an access or refresh token (its live claims end)."""

        def revoke():
            key = oauth.key_for_token(token.token)
            if key is not None and key.revoked_at is None:
                agent_key_revoke(key=key)

        await _db(revoke)
