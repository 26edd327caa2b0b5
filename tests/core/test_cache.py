"""The Redis cache shares one client and its connection pools per process
(apps.core.cache): Django builds a cache object per request context under ASGI, and
each used to open its own connection to Redis."""

from __future__ import annotations

import os
import threading

import pytest
from asgiref.sync import async_to_sync

from apps.core.cache import SharedRedisCache

OPTIONS = {"socket_connect_timeout": 1, "socket_timeout": 1}


def test_every_cache_object_of_the_process_shares_one_pool():
    # Nothing connects until a command is sent: no Redis server is needed here.
    a = SharedRedisCache("redis://127.0.0.1:6379/3", {"OPTIONS": OPTIONS})
    seen = []

    def in_another_thread():
        seen.append(SharedRedisCache("redis://127.0.0.1:6379/3", {"OPTIONS": dict(OPTIONS)}))

    t = threading.Thread(target=in_another_thread)
    t.start()
    t.join()
    b = seen[0]
    assert a is not b
    assert a._cache is b._cache
    assert a._cache._get_connection_pool(write=True) is b._cache._get_connection_pool(write=True)
    # Another database or other options: another client.
    assert SharedRedisCache("redis://127.0.0.1:6379/4", {"OPTIONS": OPTIONS})._cache is not a._cache
    assert SharedRedisCache("redis://127.0.0.1:6379/3", {"OPTIONS": {"socket_timeout": 2}})._cache is not a._cache


def _redis_connections_received(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return client.info("stats")["total_connections_received"]
    finally:
        client.close()


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL)")
@pytest.mark.parametrize("backend", ["django.core.cache.backends.redis.RedisCache", "apps.core.cache.SharedRedisCache"])
def test_api_requests_through_the_asgi_handler_reuse_one_connection(tworld, settings, backend):
    """The server's own handler (apps.core.handler), ten API calls that each check the key's
    rate in Redis: Django's cache opened a connection to Redis per request; the shared
    one opens one for all of them."""
    from asgiref.testing import ApplicationCommunicator

    from apps.core.handler import get_asgi_application

    url = os.environ["REDIS_URL"]
    settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": url, "OPTIONS": OPTIONS}}
    app = get_asgi_application()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/v1/whoami",
        "raw_path": b"/api/v1/whoami",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {tworld.owner_agent.raw}".encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }

    async def call():
        comm = ApplicationCommunicator(app, dict(scope))
        await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await comm.receive_output(10)
        await comm.receive_output(10)
        return start["status"]

    before = _redis_connections_received(url)
    statuses = [async_to_sync(call)() for _ in range(10)]
    opened = _redis_connections_received(url) - before - 1  # less this check's own
    assert statuses == [200] * 10
    if backend.endswith("SharedRedisCache"):
        # One for the ten requests; the slack is for a live server of another test module
        # (session-scoped) that may connect to the same Redis meanwhile.
        assert opened <= 3
    else:
        assert opened >= 10  # what the shared pool is for: one connection per request
