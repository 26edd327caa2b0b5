"""``ObservedHTTP``: the outermost HTTP wrapper (``retasc.asgi``).

For every HTTP request, whatever answers it (Django, /mcp, a shutdown 503):

1. a request id: the incoming ``X-Request-Id`` when it is short and safe, else a fresh
   one; set in ``apps.core.logs.request_id`` for every log line the request causes and
   sent back as the ``X-Request-Id`` response header;
2. ``retasc_http_requests_total`` and ``retasc_http_request_duration_seconds`` by URL
   pattern (never the raw path: paths hold identifiers and capability tokens);
3. one access-log line (method, URL pattern, status, milliseconds) on ``retasc.request``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from django.conf import settings
from django.db import connections
from django.urls import Resolver404, resolve

from apps.core import logs, metrics

log = logging.getLogger("retasc.request")

MCP_ROUTE = "/mcp"


def route_of(path: str) -> str:
    """The URL pattern that serves ``path``: a fixed, id-free label."""
    if path == MCP_ROUTE or path.startswith(MCP_ROUTE + "/"):
        return MCP_ROUTE
    static = "/" + settings.STATIC_URL.lstrip("/")
    if path.startswith(static):
        return static
    try:
        match = resolve(path)
    except Resolver404:
        return "unmatched"
    if match.func.__name__ == "api_not_found":
        return "unmatched"  # the API's JSON 404 catch-all
    return "/" + match.route


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class ObservedHTTP:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = logs.accept_request_id(_header(scope, b"x-request-id"))
        token = logs.request_id.set(rid)
        started = time.perf_counter()
        status = 0

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"x-request-id"]
                message = dict(message, headers=[*headers, (b"x-request-id", rid.encode())])
            await send(message)

        unanswered = 499  # no response started: the client went away (nginx's code for it)
        try:
            await self.app(scope, receive, send_with_id)
        except asyncio.CancelledError:
            raise
        except BaseException:
            unanswered = 500  # Daphne answers 500 for an application that raised
            raise
        finally:
            elapsed = time.perf_counter() - started
            route, method = route_of(scope.get("path", "")), scope.get("method", "")
            metrics.http_requests.labels(route, method, str(status or unanswered)).inc()
            metrics.http_latency.labels(route, method).observe(elapsed)
            observe_db_pool()
            log.info("%s %s %s %.1fms", method, route, status or "-", elapsed * 1000)
            logs.request_id.reset(token)


def observe_db_pool() -> None:
    """Record the PostgreSQL pool's state (``RETASC_DB_POOL_SIZE``), when there is one."""
    pool = getattr(connections["default"], "pool", None) if connections["default"].vendor == "postgresql" else None
    if pool is None:
        return
    stats = pool.get_stats()
    metrics.set_db_pool(
        size=stats.get("pool_size", 0), idle=stats.get("pool_available", 0), waiting=stats.get("requests_waiting", 0)
    )
