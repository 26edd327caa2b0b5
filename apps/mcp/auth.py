"""Bearer agent keys on /mcp: the SDK's token verifier, and one UNAUTHORIZED answer.

- ``AgentKeyVerifier.verify_token`` checks a key with ``agent_key_authenticate`` (ORM, so
  in a thread). Any failure is ``None``: the SDK then answers HTTP 401. The token it
  returns carries the Actor it built (``AgentAccessToken.actor``): the tool call of the
  same HTTP request uses it instead of checking the key a second time, as an API view
  uses the Actor its authentication class built.
- ``UnauthorizedAsJSON`` (ASGI) rewrites that 401's body into the same refusal every
  interface gives, ``{"code": "UNAUTHORIZED", "message": ...}``, keeping the
  ``WWW-Authenticate: Bearer`` header (which, with OAuth on, names the protected-resource
  metadata: see ``apps.mcp.oauth``). A valid bearer key never meets that 401, so clients
  configured with a key never start an OAuth flow.
- Anonymous discovery (``RETASC_MCP_ANONYMOUS_DISCOVERY``, test instances only): a
  request without ``Authorization`` is given a fixed placeholder bearer that the verifier
  accepts, so initialize / ping / tools/list work without a key; every tool call still
  rebuilds the Actor from the key and so answers UNAUTHORIZED.
"""

from __future__ import annotations

import json

from mcp.server.auth.provider import AccessToken
from pydantic import PrivateAttr

from apps.core.errors import ServiceError
from apps.core.metrics import refusals
from apps.mcp.db import database_turn, in_thread
from apps.orgs.actor import Actor
from apps.orgs.services import UNAUTHORIZED, agent_key_authenticate

ANONYMOUS_BEARER = "retasc-anonymous-discovery"


class AgentAccessToken(AccessToken):
    """The SDK's access token, with the Actor the key check of this request built."""

    _actor: Actor | None = PrivateAttr(default=None)

    @property
    def actor(self) -> Actor | None:
        return self._actor


def _authenticate(raw: str) -> AccessToken | None:
    try:
        with database_turn():
            actor = agent_key_authenticate(raw)
    except ServiceError:
        return None
    token = AgentAccessToken(token=raw, client_id=actor.key.prefix, subject=str(actor.principal_id), scopes=[])
    token._actor = actor
    return token


class AgentKeyVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over Retasc agent keys."""

    def __init__(self, *, anonymous_discovery: bool = False):
        self.anonymous_discovery = anonymous_discovery

    async def verify_token(self, token: str) -> AccessToken | None:
        if self.anonymous_discovery and token == ANONYMOUS_BEARER:
            return AccessToken(token=token, client_id="anonymous", scopes=[])
        return await in_thread(_authenticate, token)


def unauthorized_body() -> bytes:
    return json.dumps(UNAUTHORIZED.as_dict()).encode()


class UnauthorizedAsJSON:
    """ASGI wrapper: the transport's 401 answers carry Retasc's UNAUTHORIZED JSON."""

    def __init__(self, app, *, anonymous_discovery: bool = False):
        self.app = app
        self.anonymous_discovery = anonymous_discovery

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.anonymous_discovery and not any(k == b"authorization" for k, _ in scope["headers"]):
            scope = dict(scope, headers=[*scope["headers"], (b"authorization", f"Bearer {ANONYMOUS_BEARER}".encode())])
        replaced = False

        async def send_json_401(message):
            nonlocal replaced
            if replaced:
                return  # the original 401 body is dropped
            if message["type"] == "http.response.start" and message["status"] == 401:
                replaced = True
                refusals.labels("mcp", "UNAUTHORIZED").inc()
                body = unauthorized_body()
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
                headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await self.app(scope, receive, send_json_401)
