"""SIGTERM under load: requests in flight finish, new ones get 503 UNAVAILABLE, the
process exits (apps.core.graceful).

Daphne cancels every application instance on SIGTERM and then stops the event loop; a
request whose worker thread was mid-view used to wait for ever on the stopped loop and
the process never exited.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter

import pytest

from apps.core.graceful import GracefulHTTP


class Recorder:
    def __init__(self):
        self.messages: list[dict] = []

    async def __call__(self, message):
        self.messages.append(message)

    @property
    def status(self):
        return next((m["status"] for m in self.messages if m["type"] == "http.response.start"), None)

    @property
    def body(self) -> dict:
        return json.loads(b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body"))


def slow_app(started: asyncio.Event, release: asyncio.Event, seen: list):
    async def app(scope, receive, send):
        started.set()
        try:
            await release.wait()  # stands for the worker thread still running the view
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})
        seen.append("finished")

    return app


def test_shutdown_lets_the_request_in_flight_finish_and_refuses_new_ones():
    async def scenario():
        started, release, seen = asyncio.Event(), asyncio.Event(), []
        app = GracefulHTTP(slow_app(started, release, seen), grace_seconds=5, on_reactor=False)
        first = Recorder()
        request = asyncio.ensure_future(app({"type": "http"}, None, first))
        await started.wait()
        stopping = asyncio.ensure_future(app.shutdown())  # the reactor's before-shutdown trigger
        await asyncio.sleep(0)
        request.cancel()  # then Daphne cancels every application instance
        late = Recorder()
        await app({"type": "http"}, None, late)
        assert late.status == 503 and late.body["code"] == "UNAVAILABLE"
        assert not stopping.done()  # shutdown waits for the request in flight
        release.set()
        await request  # finishes normally: no CancelledError
        await asyncio.wait_for(stopping, 1)
        assert first.status == 200 and seen == ["finished"]

    asyncio.run(scenario())


def test_a_client_that_goes_away_still_cancels_its_request():
    async def scenario():
        started, release, seen = asyncio.Event(), asyncio.Event(), []
        app = GracefulHTTP(slow_app(started, release, seen), grace_seconds=5, on_reactor=False)
        request = asyncio.ensure_future(app({"type": "http"}, None, Recorder()))
        await started.wait()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await asyncio.sleep(0)
        assert seen == ["cancelled"]

    asyncio.run(scenario())


def test_the_wait_at_shutdown_is_bounded():
    async def scenario():
        started, release, seen = asyncio.Event(), asyncio.Event(), []
        app = GracefulHTTP(slow_app(started, release, seen), grace_seconds=0.2, on_reactor=False)
        request = asyncio.ensure_future(app({"type": "http"}, None, Recorder()))
        await started.wait()
        stopping = asyncio.ensure_future(app.shutdown())
        await asyncio.sleep(0)
        request.cancel()
        t0 = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await request
        await stopping
        assert time.monotonic() - t0 < 2
        assert seen == ["cancelled"]

    asyncio.run(scenario())


def test_daphne_exits_on_sigterm_under_load(tworld, tmp_path):
    """16 clients keep calling the API while Daphne gets SIGTERM: it exits promptly, and
    every answer is a whole response (200, or 503 UNAVAILABLE once it is stopping)."""
    import httpx2

    from tests.live import start_daphne

    server = start_daphne(tmp_path)
    key = tworld.owner_agent.raw
    stop = threading.Event()
    seen: Counter = Counter()
    lock = threading.Lock()

    def client():
        with httpx2.Client(base_url=server.base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
            while not stop.is_set():
                try:
                    r = c.get("/api/v1/whoami")
                    label = f"{r.status_code}:{r.json().get('code') if r.status_code != 200 else ''}"
                except (httpx2.TransportError, ValueError) as exc:
                    label = type(exc).__name__
                    time.sleep(0.05)
                with lock:
                    seen[label] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(16)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while seen["200:"] < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen["200:"] >= 50, (seen, server.log()[-2000:])
        t0 = time.monotonic()
        server.proc.send_signal(15)
        try:
            code = server.proc.wait(25)
        except Exception:  # noqa: BLE001
            code = None
        exit_s = time.monotonic() - t0
    finally:
        stop.set()
        for t in threads:
            t.join(35)
        server.stop(timeout=5)
    assert code is not None, f"Daphne did not exit within 25 s of SIGTERM under load: {dict(seen)}"
    assert code in (0, -15) and exit_s < 25, (code, exit_s, server.log()[-2000:])
    answers = {k for k in seen if k[0].isdigit()}
    assert answers <= {"200:", "503:UNAVAILABLE"}, dict(seen)
