"""Graceful HTTP shutdown under Daphne (SIGTERM).

On SIGTERM Daphne cancels every application instance at once and the reactor then stops
the event loop. A request whose worker thread is in the middle of a sync view cannot be
cancelled: the thread goes on, reaches its next hop back to the loop (publishing live
events after commit) and waits there for ever, because the loop is gone. The interpreter's exit joins those threads, so the process never exits.

``GracefulHTTP`` wraps the HTTP side of the ASGI application:

1. once shutdown has begun, a new request is refused at once with the API's retryable
   JSON ``503 UNAVAILABLE`` (``Retry-After: 1``);
2. a request in flight when Daphne cancels it at shutdown is left to finish (its
   response is still sent) for up to ``grace_seconds``, then cancelled as before;
3. under Daphne, reactor shutdown waits (same bound) for the requests in flight, so the
   loop keeps running until their threads are done.

A cancellation that is not a shutdown (the client went away) behaves as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

log = logging.getLogger(__name__)

GRACE_SECONDS = 20.0

_BODY = json.dumps({"code": "UNAVAILABLE", "message": "The server is shutting down; retry shortly.", "retryable": True}).encode()


class GracefulHTTP:
    def __init__(self, app, *, grace_seconds: float = GRACE_SECONDS, on_reactor: bool = True):
        self.app = app
        self.grace_seconds = grace_seconds
        self.stopping = False
        self.inflight: set[asyncio.Future] = set()
        if on_reactor:
            # Registered at import, before Daphne registers its own "cancel everything"
            # trigger: triggers of one phase start in order, so ``stopping`` is already set
            # when the cancellations arrive.
            _before_reactor_shutdown(self.shutdown)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.stopping:
            await _unavailable(send)
            return
        task = asyncio.ensure_future(self.app(scope, receive, send))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not self.stopping or task.done():
                task.cancel()  # the client went away: as without this wrapper
                raise
            # Shutdown: let the request finish while the loop still runs.
            await asyncio.wait({task}, timeout=self.grace_seconds)
            if not task.done():
                task.cancel()
                raise
            return task.result()  # as the request ended (CancelledError if it was cancelled)

    async def shutdown(self) -> None:
        """Refuse new requests; wait (bounded) for the ones in flight."""
        self.stopping = True
        pending = set(self.inflight)
        if pending:
            log.info("shutdown: waiting for %d request(s) in flight", len(pending))
            _done, left = await asyncio.wait(pending, timeout=self.grace_seconds)
            if left:
                log.warning("shutdown: %d request(s) still running after %ss", len(left), self.grace_seconds)


async def _unavailable(send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(_BODY)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _BODY})


def _before_reactor_shutdown(stop) -> bool:
    """Under Daphne, make reactor shutdown wait for ``stop()``. Elsewhere, do nothing
    (an installed reactor only: importing one would install a default reactor)."""
    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import defer, reactor  # deferred: importing the reactor installs one

    reactor.addSystemEventTrigger("before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(stop())))
    return True
