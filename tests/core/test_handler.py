"""apps.core.handler: Django under ASGI with one thread hop, reused request threads, and a
shorter middleware chain for /api/v1/ calls that only a key can authenticate.

Driven in process through the ASGI interface (the handler Daphne runs), with real
commits (views run on the request threads, not in the test's transaction).
"""

from __future__ import annotations

import asyncio
import threading

import httpx2
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import request_started
from django.test import Client, override_settings

from apps.core.handler import SyncASGIHandler, _ThreadFreeList
from apps.issues.models import Issue

BASE = "http://127.0.0.1"


def run(handler, *requests):
    """Send (method, path, headers, json) requests one after another; the responses."""

    async def go():
        transport = httpx2.ASGITransport(app=handler)
        async with httpx2.AsyncClient(transport=transport, base_url=BASE) as c:
            return [await c.request(method, path, headers=headers, json=body) for method, path, headers, body in requests]

    return asyncio.run(go())


@pytest.fixture
def handler():
    return SyncASGIHandler()


@pytest.fixture
def chains(handler, monkeypatch):
    """Which chain served each request: "key" or "full"."""
    used = []
    key_get, full_get = handler.key_chain.get_response, SyncASGIHandler.__mro__[1].get_response

    def key(request):
        used.append("key")
        return key_get(request)

    def full(self, request):
        used.append("full")
        return full_get(self, request)

    monkeypatch.setattr(handler.key_chain, "get_response", key)
    monkeypatch.setattr(SyncASGIHandler.__mro__[1], "get_response", full)
    return used


def session_cookie(user) -> str:
    c = Client()
    c.force_login(user)
    return c.cookies["sessionid"].value


def test_a_key_call_runs_the_short_chain_with_the_same_security_headers(tworld, handler, chains):
    auth = {"Authorization": f"Bearer {tworld.owner_agent.raw}"}
    (r,) = run(handler, ("GET", "/api/v1/whoami", auth, None))
    assert r.status_code == 200 and r.json()["principal"]["email"] == tworld.owner.email
    assert chains == ["key"]
    assert r.headers["X-Frame-Options"] == "DENY" and r.headers["X-Content-Type-Options"] == "nosniff"
    assert "set-cookie" not in r.headers
    # A wrong key is refused the same way on the short chain.
    (r,) = run(handler, ("GET", "/api/v1/whoami", {"Authorization": "Bearer rtsc_nope"}, None))
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"


def test_a_session_call_runs_the_whole_chain_and_writes_need_csrf(tworld, handler, chains):
    sessionid = session_cookie(tworld.member)
    cookie = {"Cookie": f"sessionid={sessionid}"}
    before = Issue.objects.count()
    got, refused = run(
        handler,
        ("GET", "/api/v1/whoami", cookie, None),
        ("POST", "/api/v1/issues", cookie, {"title": "t", "work": True, "noDependency": "x"}),
    )
    assert got.status_code == 200 and got.json()["principal"]["email"] == tworld.member.email
    assert refused.status_code == 403  # no CSRF token: nothing written
    assert Issue.objects.count() == before
    assert chains == ["full", "full"]


def test_a_session_cookie_with_a_key_runs_the_whole_chain_and_the_key_decides(tworld, handler, chains):
    sessionid = session_cookie(tworld.member)
    headers = {"Cookie": f"sessionid={sessionid}", "Authorization": f"Bearer {tworld.owner_agent.raw}"}
    (r,) = run(handler, ("GET", "/api/v1/whoami", headers, None))
    assert r.status_code == 200 and r.json()["principal"]["email"] == tworld.owner.email
    assert chains == ["full"]


def test_pages_and_other_paths_run_the_whole_chain(tworld, handler, chains):
    auth = {"Authorization": f"Bearer {tworld.owner_agent.raw}"}
    run(handler, ("GET", "/api/health", auth, None), ("GET", "/", auth, None))
    assert chains == ["full", "full"]


def test_request_threads_are_reused(tworld, handler):
    seen = []

    def record(**kwargs):
        seen.append(threading.get_ident())

    request_started.connect(record)
    try:
        auth = {"Authorization": f"Bearer {tworld.owner_agent.raw}"}
        responses = run(handler, *[("GET", "/api/v1/whoami", auth, None)] * 6)
    finally:
        request_started.disconnect(record)
    assert [r.status_code for r in responses] == [200] * 6
    assert len(seen) == 6 and len(set(seen)) == 1  # one after another: the same thread each time


def test_the_free_list_keeps_at_most_its_size():
    threads = _ThreadFreeList(keep=1)
    a, b = threads.take(), threads.take()
    assert a is not b
    threads.give_back(a)
    threads.give_back(b)  # beyond the size: shut down
    assert threads.take() is a
    with pytest.raises(RuntimeError):
        b.submit(print)


@override_settings(RETASC_API_KEY_MIDDLEWARE=["django.contrib.sessions.middleware.NoSuchMiddleware"])
def test_the_key_chain_must_be_a_subset_of_the_middleware():
    with pytest.raises(ImproperlyConfigured):
        SyncASGIHandler()


@override_settings(
    RETASC_API_KEY_MIDDLEWARE=["django.middleware.common.CommonMiddleware", "apps.core.clientip.UntrustedForwardedHeaders"]
)
def test_the_key_chain_must_keep_the_order():
    with pytest.raises(ImproperlyConfigured):
        SyncASGIHandler()
