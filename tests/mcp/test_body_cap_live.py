"""Request bodies are capped before the app reads them, on a live Daphne (item: 400 MB
unauthenticated POSTs to /mcp and /api/v1/issues grew the server by half a gigabyte; a
300 MB PUT to a bogus upload URL was read in full before its 413; /mcp answered 413 in
plain text). Memory itself is measured outside the tests: docs/security.md."""

from __future__ import annotations

import http.client
import json
import re
import socket
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.slow

CAP = 64 * 1024
UPLOAD_CAP = 80 * 1024


def _request(base: str, method: str, path: str, body, *, chunked=False, headers=None):
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})}
        if chunked:
            conn.request(method, path, body=iter(body), headers=hdrs, encode_chunked=True)
        else:
            conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


@pytest.fixture
def capped(server_factory, transactional_db):
    return server_factory(RETASC_MAX_BODY_BYTES=str(CAP), RETASC_UPLOAD_MAX_BYTES=str(UPLOAD_CAP))


def _too_large(status, ctype, body, limit):
    assert status == 413
    assert ctype.startswith("application/json")
    assert json.loads(body) == {
        "code": "TOO_LARGE",
        "message": f"A request body may be at most {limit} bytes.",
        "maxBytes": limit,
    }


def test_oversized_bodies_get_json_413_everywhere(capped):
    big = b"[" * (CAP + 1)
    for path in ("/mcp", "/api/v1/issues", "/api/v1/cli/orgs"):
        _too_large(*_request(capped.base, "POST", path, big), CAP)
        # Chunked: no length declared, the bytes are counted as they stream.
        _too_large(*_request(capped.base, "POST", path, [b"[" * 16384] * 8, chunked=True), CAP)
    # Uploads: their own cap, checked before the (bogus) token is even looked at.
    _too_large(*_request(capped.base, "PUT", "/api/v1/uploads/bogus", b"x" * (UPLOAD_CAP + 1)), UPLOAD_CAP)
    _too_large(*_request(capped.base, "PUT", "/api/v1/uploads/bogus", [b"x" * 40960] * 3, chunked=True), UPLOAD_CAP)


def test_bodies_within_the_cap_still_work(capped, tworld):
    key = tworld.owner_agent.raw
    body = {"title": "Big body", "body": "b" * 50000, "work": True, "noDependency": "none"}
    status, _, raw = _request(
        capped.base, "POST", "/api/v1/issues", json.dumps(body).encode(), headers={"Authorization": f"Bearer {key}"}
    )
    assert status == 201, raw
    # An upload larger than the general cap but within its own.
    status, _, raw = _request(capped.base, "PUT", "/api/v1/uploads/bogus", b"x" * (CAP + 10))
    assert status != 413


def _answer_before_the_body_ends(base: str, path: str, head: bytes, sent: bytes) -> tuple[int, dict]:
    """Send the headers and part of a body, never its end; read the answer."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=20) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode() + head + b"\r\n")
        sock.sendall(sent)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
            re.search(rb"content-length: (\d+)", data.lower()).group(1) if b"content-length: " in data.lower() else 1 << 30
        ):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1])


def test_the_refusal_comes_before_the_server_buffers_the_body(capped):
    """Daphne used to receive a whole body, then queue all of it in memory, before any app
    code ran: the answer came only after the last byte. Now it comes while the client is
    still sending: nothing past the cap is ever buffered."""
    declared = b"Content-Length: %d\r\n" % (400 * 1024 * 1024)
    for path in ("/mcp", "/api/v1/issues"):
        status, body = _answer_before_the_body_ends(capped.base, path, declared, b"[" * 1000)
        assert (status, body["code"], body["maxBytes"]) == (413, "TOO_LARGE", CAP)
        chunked = b"Transfer-Encoding: chunked\r\n"
        part = b"4000\r\n" + b"[" * 0x4000 + b"\r\n"  # 16 KiB chunks, more than the cap, no final chunk
        status, body = _answer_before_the_body_ends(capped.base, path, chunked, part * 5)
        assert (status, body["code"]) == (413, "TOO_LARGE")
