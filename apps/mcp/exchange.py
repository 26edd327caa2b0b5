"""One POST, one JSON-RPC exchange: the stateless handshake-era transport without a
per-request session.

In stateless JSON mode the SDK's session manager answers every handshake-era POST (the
``initialize`` handshake's protocol versions, or no ``MCP-Protocol-Version`` header) by
building a whole connection for it: a ``StreamableHTTPServerTransport`` with its memory
streams, a server task in the manager's task group, a ``JSONRPCDispatcher`` reading the
one message from a stream and writing the one answer to another, and the transport's
message router between them. The POST's answer waits for three task switches and the
teardown. That machinery exists for sessions and SSE streams; a stateless JSON request
has neither.

``SingleExchange`` serves exactly those POSTs as the SDK itself serves a 2026-07-28
request (``mcp.server._streamable_http_modern``): the message is checked and validated
as the transport checks it, then handed to the SDK's own handler kernel with
``mcp.server.runner.serve_one`` on a born-ready ``Connection`` (what the stateless
manager builds too), and the answer is written as the transport writes it. The protocol
is the SDK's: the same handlers, the same initialize result, the same validation of
params and results, the same error codes and HTTP statuses. Everything else (GET,
DELETE, other methods, 2026-07-28 requests, SSE mode, a stateful manager) goes to the
SDK's manager unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import anyio
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, aclose_shielded, serve_one
from mcp.server.streamable_http import CONTENT_TYPE_JSON, check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecurityMiddleware
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request

log = logging.getLogger(__name__)

_VERSION_HEADER = b"mcp-protocol-version"
_JSON_HEADERS = [(b"content-type", CONTENT_TYPE_JSON.encode())]
_TRANSPORT = TransportContext(kind="streamable-http", can_send_request=False)


@dataclass
class _ExchangeContext:
    """The ``DispatchContext`` of one request: what the stateless transport gives a
    handler in JSON mode. Its answer is the only thing on the wire, so notifications and
    progress tied to the request are dropped (the transport's router drops them too) and
    a server-to-client request has no channel."""

    request_id: RequestId
    message_metadata: ServerMessageMetadata
    transport: TransportContext = _TRANSPORT
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = field(default=False, init=False)

    async def send_raw_request(self, method, params, opts=None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method, params, opts=None) -> None:
        return None

    async def progress(self, progress, total=None, message=None) -> None:
        return None


def install(manager: StreamableHTTPSessionManager) -> bool:
    """Serve the manager's stateless JSON POSTs with ``SingleExchange`` (its ASGI entry
    is ``manager.asgi_app``, which the SDK's Starlette route calls). Returns whether it
    did: a stateful or SSE manager is left as it is."""
    if not (manager.stateless and manager.json_response):
        return False
    exchange = SingleExchange(manager, fallback=manager.asgi_app)
    manager.asgi_app = RequestBodyLimitMiddleware(exchange, manager.max_request_body_size)
    return True


class SingleExchange:
    def __init__(self, manager: StreamableHTTPSessionManager, *, fallback):
        self.manager = manager
        self.server = manager.app
        self.fallback = fallback
        self.security = TransportSecurityMiddleware(manager.security_settings)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.fallback(scope, receive, send)
        version = None
        for name, value in scope["headers"]:
            if name == _VERSION_HEADER:
                version = value.decode("latin-1")
                break
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return await self.fallback(scope, receive, send)  # a 2026-07-28 request
        request = Request(scope, receive)

        # The checks of StreamableHTTPServerTransport._handle_request, in its order.
        refused = await self.security.validate_request(request, is_post=True)
        if refused is not None:
            return await refused(scope, receive, send)
        has_json, _ = check_accept_headers(request)
        if not has_json:
            return await _error(send, "Not Acceptable: Client must accept application/json", HTTPStatus.NOT_ACCEPTABLE)
        content_type = request.headers.get("content-type", "")
        if not any(part.strip() == CONTENT_TYPE_JSON for part in content_type.split(";")[0].split(",")):
            return await _error(
                send, "Unsupported Media Type: Content-Type must be application/json", HTTPStatus.UNSUPPORTED_MEDIA_TYPE
            )
        body = await request.body()
        try:
            raw = pydantic_core.from_json(body)
        except ValueError as exc:
            return await _error(send, f"Parse error: {exc}", HTTPStatus.BAD_REQUEST, PARSE_ERROR)
        try:
            message = _validate(raw)
        except ValidationError as exc:
            return await _error(send, f"Validation error: {exc}", HTTPStatus.BAD_REQUEST, INVALID_PARAMS)

        lifespan_state = getattr(self.manager, "_lifespan_state", None)
        connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
        if not isinstance(message, JSONRPCRequest):
            # A notification or a response: 202 at once, as the transport answers; a
            # notification is then handled as the transport's server task would.
            await _send(send, HTTPStatus.ACCEPTED, b"")
            if isinstance(message, JSONRPCNotification):
                context = _ExchangeContext(None, ServerMessageMetadata(request_context=request, can_send_request=False))
                try:
                    await ServerRunner(self.server, connection, lifespan_state).on_notify(context, message.method, message.params)
                finally:
                    await aclose_shielded(connection)
            return None

        context = _ExchangeContext(message.id, ServerMessageMetadata(request_context=request, can_send_request=False))
        try:
            result = await serve_one(
                self.server, context, message.method, message.params, connection=connection, lifespan_state=lifespan_state
            )
        except Exception as exc:
            # The handshake-era dispatcher's mapping (JSONRPCDispatcher._handle_request).
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("handler for %r raised", message.method)
                error = ErrorData(code=0, message=str(exc))
            answer = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        else:
            answer = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
        await _send(send, HTTPStatus.OK, answer.model_dump_json(by_alias=True, exclude_unset=True).encode())
        return None


def _validate(raw: Any):
    """``jsonrpc_message_adapter`` (the union of the four message kinds) decides; a
    request, the common case, is tried as one first, which is the same answer sooner."""
    if isinstance(raw, dict) and "method" in raw and "id" in raw:
        try:
            return JSONRPCRequest.model_validate(raw, by_name=False)
        except ValidationError:
            pass  # the union decides, and words the error
    return jsonrpc_message_adapter.validate_python(raw, by_name=False)


async def _send(send, status: int, body: bytes) -> None:
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": int(status), "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _error(send, message: str, status: HTTPStatus, code: int = INVALID_REQUEST) -> None:
    error = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))
    await _send(send, status, error.model_dump_json(by_alias=True, exclude_unset=True).encode())
