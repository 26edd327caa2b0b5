"""An ASGI cap on request bodies, in front of the whole app (Django, /mcp, everything).

Without it each app read a body whole before its own limit applied: two 400 MB
unauthenticated POSTs grew a server process by half a gigabyte that was never given back.

``BodyCap`` answers ``413 {"code": "TOO_LARGE", "message": ...}`` (JSON, on every path)
before the app is called:

1. a ``Content-Length`` over the cap is refused at once, without reading the body;
2. a body without ``Content-Length`` (chunked) is read here first, counting the bytes,
   and refused as soon as it passes the cap; a body within the cap is then handed to the
   app exactly as it arrived. (Buffering costs at most the cap per request; the app would
   have read the body anyway.)

A ``Content-Length`` that is not a number is a 400. Uploads (``PUT /api/v1/uploads/...``)
have their own, larger cap (``RETASC_UPLOAD_MAX_BYTES``); everything else
``RETASC_MAX_BODY_BYTES``. A proxy in front (the nginx site in deploy/) should cap bodies
too, since the ASGI server receives a body before it calls the app.
"""

from __future__ import annotations

import json

UPLOAD_PREFIX = "/api/v1/uploads/"


def _json(status: int, code: str, message: str, **extra) -> tuple[int, bytes]:
    return status, json.dumps({"code": code, "message": message, **extra}).encode()


async def _answer(send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyCap:
    def __init__(self, app, *, max_bytes: int, upload_max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes
        self.upload_max_bytes = upload_max_bytes

    def limit_for(self, scope) -> int:
        if scope.get("path", "").startswith(UPLOAD_PREFIX):
            return self.upload_max_bytes
        return self.max_bytes

    def too_large(self, limit: int) -> tuple[int, bytes]:
        return _json(413, "TOO_LARGE", f"A request body may be at most {limit} bytes.", maxBytes=limit)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope)
        lengths = [v for k, v in scope.get("headers", []) if k.lower() == b"content-length"]
        if lengths:
            text = lengths[0].decode("latin-1").strip()
            if not text.isdigit() or len(set(lengths)) > 1:
                await _answer(send, *_json(400, "INVALID_ARGUMENT", "The Content-Length header is not a number."))
                return
            if int(text) > limit:
                await _answer(send, *self.too_large(limit))
                return
            return await self.app(scope, receive, send)
        # No length given: count the bytes as they stream, before the app sees any.
        messages, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # http.disconnect: the client went away
            total += len(message.get("body", b""))
            if total > limit:
                await _answer(send, *self.too_large(limit))
                return
            messages.append(message)
            if not message.get("more_body", False):
                break

        async def replay():
            if messages:
                return messages.pop(0)
            return await receive()

        return await self.app(scope, replay, send)
