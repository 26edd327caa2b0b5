"""The body cap at Daphne's door, before Daphne buffers a byte in memory.

Daphne (``daphne.http_protocol.WebRequest``) receives a whole request body, then puts all
of it on the application's queue at once, in memory, before the application reads any:
a 400 MB POST cost 400 MB of resident memory whatever the application answered, and the
freed fragments were not given back. The ASGI cap (apps.core.bodycap) comes too late for
that, so the same limits are also applied here, on the connection, as the request
arrives:

1. a ``Content-Length`` over the cap: refused once the headers are in;
2. a body without one (chunked): its bytes are counted as they arrive and the request is
   refused as soon as they pass the cap.

The refusal is the same JSON 413 the ASGI cap answers; what still arrives of the body is
dropped unread into nothing, and the connection closes two seconds later. The ASGI cap stays as the second line, and as the
only one under another ASGI server.

This hooks two of Twisted's documented per-request callbacks (``gotLength``,
``handleContentChunk``) on Daphne's request class, and Daphne's ``process`` so that a
refused request never reaches the application. ``install`` is called once, by the ASGI
entry point (retasc/asgi.py).
"""

from __future__ import annotations

import json
import logging

from daphne.http_protocol import WebRequest

from apps.core.bodycap import UPLOAD_PREFIX

log = logging.getLogger(__name__)

_limits: dict[str, int] = {}
LINGER_SECONDS = 2.0


def limit_for(path: bytes) -> int:
    if path.startswith(UPLOAD_PREFIX.encode()):
        return _limits["upload"]
    return _limits["default"]


def _refuse(request, limit: int) -> None:
    request._retasc_refused = True
    body = json.dumps(
        {"code": "TOO_LARGE", "message": f"A request body may be at most {limit} bytes.", "maxBytes": limit}
    ).encode()
    head = (
        b"HTTP/1.1 413 Content Too Large\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n"
    )
    transport = request.channel.transport
    transport.write(head + body)
    # A lingering close: the rest of the body is read and dropped (never stored) for a
    # moment before the connection closes. Closing at once, with the client's bytes still
    # unread, makes the kernel reset the connection, and the client may lose the answer.
    reactor = getattr(transport, "reactor", None)
    if reactor is None:
        transport.loseConnection()
    else:
        reactor.callLater(LINGER_SECONDS, transport.loseConnection)
    log.info("refused a request body over %d bytes", limit)


_original_got_length = WebRequest.gotLength
_original_handle_content_chunk = WebRequest.handleContentChunk
_original_process = WebRequest.process


def _got_length(self, length):
    _original_got_length(self, length)
    self._retasc_limit = limit_for(getattr(self.channel, "_path", b"") or b"")
    self._retasc_received = 0
    self._retasc_refused = False
    if length is not None and length > self._retasc_limit:
        _refuse(self, self._retasc_limit)


def _handle_content_chunk(self, data):
    if getattr(self, "_retasc_refused", False):
        return
    limit = getattr(self, "_retasc_limit", None)
    if limit is not None:
        self._retasc_received += len(data)
        if self._retasc_received > limit:
            _refuse(self, limit)
            return
    _original_handle_content_chunk(self, data)


def _process(self):
    if getattr(self, "_retasc_refused", False):
        return None  # answered already; the application never sees it
    return _original_process(self)


def install(*, max_bytes: int, upload_max_bytes: int) -> None:
    _limits.update(default=max_bytes, upload=upload_max_bytes)
    WebRequest.gotLength = _got_length
    WebRequest.handleContentChunk = _handle_content_chunk
    WebRequest.process = _process
