"""The ASGI body cap (apps.core.bodycap), driven directly: the app is never called for a
body over the cap, whether the length is declared or only counted as it streams."""

from __future__ import annotations

import asyncio
import json

from apps.core.bodycap import BodyCap
from tests.core.test_graceful import Recorder


def _run(cap: BodyCap, scope: dict, chunks: list[bytes]):
    seen = {"called": False, "body": b""}

    async def app(scope, receive, send):
        seen["called"] = True
        while True:
            message = await receive()
            seen["body"] += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    pulled = {"n": 0}

    async def receive():
        pulled["n"] += 1
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    rec = Recorder()
    asyncio.run(BodyCap(app, max_bytes=cap.max_bytes, upload_max_bytes=cap.upload_max_bytes)(scope, receive, rec))
    return rec, seen, pulled["n"]


def _scope(path="/api/v1/issues", headers=()):
    return {"type": "http", "method": "POST", "path": path, "headers": list(headers)}


CAP = BodyCap(None, max_bytes=100, upload_max_bytes=1000)


def test_declared_length_over_the_cap_is_refused_unread():
    rec, seen, pulled = _run(CAP, _scope(headers=[(b"content-length", b"101")]), [b"x" * 101])
    assert (rec.status, rec.body) == (
        413,
        {"code": "TOO_LARGE", "message": "A request body may be at most 100 bytes.", "maxBytes": 100},
    )
    assert not seen["called"] and pulled == 0  # not a byte read


def test_streamed_body_over_the_cap_is_refused_as_soon_as_it_passes():
    rec, seen, pulled = _run(CAP, _scope(), [b"x" * 60, b"x" * 60, b"x" * 60, b"x" * 60])
    assert rec.status == 413 and rec.body["code"] == "TOO_LARGE"
    assert not seen["called"] and pulled == 2  # stopped at the chunk that passed the cap


def test_bodies_within_the_cap_reach_the_app_whole():
    rec, seen, _ = _run(CAP, _scope(), [b"a" * 50, b"b" * 50])
    assert (rec.status, seen["body"]) == (200, b"a" * 50 + b"b" * 50)
    rec, seen, _ = _run(CAP, _scope(headers=[(b"content-length", b"100")]), [b"c" * 100])
    assert (rec.status, seen["body"]) == (200, b"c" * 100)


def test_uploads_have_their_own_cap():
    path = "/api/v1/uploads/sometoken"
    rec, seen, _ = _run(CAP, _scope(path, [(b"content-length", b"900")]), [b"x" * 900])
    assert rec.status == 200 and len(seen["body"]) == 900
    rec, seen, _ = _run(CAP, _scope(path, [(b"content-length", b"1001")]), [b"x" * 1001])
    assert rec.status == 413 and rec.body["maxBytes"] == 1000 and not seen["called"]


def test_a_length_that_is_not_a_number_is_a_400():
    for value in (b"12abc", b"-1", b""):
        rec, seen, _ = _run(CAP, _scope(headers=[(b"content-length", value)]), [b"x"])
        assert (rec.status, rec.body["code"]) == (400, "INVALID_ARGUMENT") and not seen["called"]
    rec, seen, _ = _run(CAP, _scope(headers=[(b"content-length", b"1"), (b"content-length", b"2")]), [b"x"])
    assert rec.status == 400 and not seen["called"]


def test_websockets_pass_through():
    called = []

    async def app(scope, receive, send):
        called.append(scope["type"])

    asyncio.run(BodyCap(app, max_bytes=1, upload_max_bytes=1)({"type": "websocket", "path": "/ws/"}, None, None))
    assert called == ["websocket"]


def test_the_answer_is_json_with_a_length():
    rec, _, _ = _run(CAP, _scope(headers=[(b"content-length", b"5000")]), [b""])
    start = next(m for m in rec.messages if m["type"] == "http.response.start")
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(json.dumps(rec.body))
