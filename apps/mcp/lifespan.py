"""ASGI wrapper that runs the MCP session manager without an ASGI lifespan.

The SDK's Starlette app starts its task group in the lifespan (``session_manager.run()``),
but Daphne (and Channels' ``ProtocolTypeRouter``) never send one: a naive mount answers
500 "Task group is not initialized". So, once per process:

1. the first request starts a long-lived task (in a fresh context, so no request's
   contextvars leak into it) that enters ``session_manager.run()`` and waits for a stop
   signal; concurrent first requests wait on one ``asyncio.Lock`` and the ready event;
2. under Daphne, a Twisted "before shutdown" trigger stops that task and returns a
   Deferred for it, so SIGTERM (reactor.stop) waits for the task group to end. Without
   it Daphne stops listening but never exits once a sync tool ran: the anyio worker
   threads are non-daemon and only end with the task group.

``run()`` can be entered only once per manager: after a stop this wrapper refuses with
503 instead of restarting.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys

log = logging.getLogger(__name__)

_STOP_TIMEOUT_SECONDS = 10


class LifespanlessMCP:
    def __init__(self, app, session_manager):
        self.app = app
        self.session_manager = session_manager
        self._lock = asyncio.Lock()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        if not self._ready.is_set() or self._task is None or self._task.done():
            if not await self._ensure_started():
                await _plain(send, 503, b"The MCP endpoint is shutting down.")
                return
        await self.app(scope, receive, send)

    async def _ensure_started(self) -> bool:
        async with self._lock:
            if self._task is None:
                loop = asyncio.get_running_loop()
                self._task = loop.create_task(self._run(), name="mcp-session-manager", context=contextvars.Context())
                _on_reactor_shutdown(self.stop)
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
        if self._task.done():
            if not self._task.cancelled() and self._task.exception() is not None:
                log.error("MCP session manager stopped", exc_info=self._task.exception())
            return False
        return True

    async def _run(self) -> None:
        async with self.session_manager.run():
            self._ready.set()
            await self._stop.wait()

    async def stop(self) -> None:
        """Stop the session manager task group (idempotent); waits a bounded time."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=_STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            log.warning("MCP session manager did not stop in %ss; cancelling it", _STOP_TIMEOUT_SECONDS)
            task.cancel()
        except Exception:
            log.exception("MCP session manager failed while stopping")


def _on_reactor_shutdown(stop) -> bool:
    """Under Daphne, make reactor shutdown wait for ``stop()``. Elsewhere, do nothing.

    Only a reactor that is already installed is used: importing
    ``twisted.internet.reactor`` would install a default one under other servers.
    """
    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import defer, reactor  # deferred: importing the reactor installs one

    def trigger():
        return defer.Deferred.fromFuture(asyncio.ensure_future(stop()))

    reactor.addSystemEventTrigger("before", "shutdown", trigger)
    return True


async def _plain(send, status: int, text: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": text})
