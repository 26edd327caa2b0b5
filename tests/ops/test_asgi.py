"""ObservedHTTP: request id in and out, counted by URL pattern, whatever the inner app does."""

from __future__ import annotations

import asyncio

import pytest

from apps.core import logs, metrics
from apps.ops.asgi import ObservedHTTP


def run(app, path="/api/v1/issues/ACME-7", headers=()):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": list(headers)}
    asyncio.run(ObservedHTTP(app)(scope, receive, send))
    return sent


def count(route, status):
    labels = {"route": route, "method": "GET", "status": status}
    return metrics.REGISTRY.get_sample_value("retasc_http_requests_total", labels) or 0


def test_the_request_id_is_set_for_the_app_and_sent_back():
    seen = []

    async def app(scope, receive, send):
        seen.append(logs.request_id.get())
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-request-id", b"forged")]})
        await send({"type": "http.response.body", "body": b"ok"})

    before = count("/api/v1/issues/<str:identifier>", "200")
    sent = run(app, headers=[(b"x-request-id", b"abc-123")])
    assert seen == ["abc-123"] and logs.request_id.get() == ""
    assert [v for k, v in sent[0]["headers"] if k == b"x-request-id"] == [b"abc-123"]
    assert count("/api/v1/issues/<str:identifier>", "200") == before + 1


def test_an_app_that_raises_is_counted_as_500():
    async def app(scope, receive, send):
        raise RuntimeError("broken")

    before = count("unmatched", "500")
    with pytest.raises(RuntimeError):
        run(app, path="/nowhere/at/all/")
    assert count("unmatched", "500") == before + 1
