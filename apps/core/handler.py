"""How Django requests run under Daphne.

``SyncASGIHandler`` is Django's ASGI handler with these changes:

- **One thread hop.** The middleware chain and the view run as one synchronous call, in
  the request's own worker thread, entered once per request. Stock Django builds the
  chain for async use: under ASGI its innermost handler is async, so a chain of
  sync-only middleware (WhiteNoise is one) hops from a worker thread to the event loop
  and back to a thread for every request, and async-capable middleware hop to a thread
  for each ``process_request`` and ``process_response``. Every hop waits for a busy
  event loop or for the GIL; under load those waits were a large share of a request's
  time (docs/benchmarks.md). Every view and middleware here is synchronous, so nothing
  is lost.
- **Request threads are reused.** Stock Django gives each request a fresh
  single-thread executor (a ``ThreadSensitiveContext`` without one), so every request
  started a thread and joined it at the end. Here each request still gets a thread of
  its own for all its thread-sensitive work (the ``request_started`` and
  ``request_finished`` signals, which open and close its database connection, the
  middleware and the view, closing the response), but the thread comes from a free
  list and goes back to it afterwards.
- **A shorter chain for API calls with a key**: a request to ``/api/v1/`` that carries an
  ``Authorization`` header and no session cookie cannot be authenticated by a session
  (without the cookie there is none to find), so the session, CSRF, locale, messages,
  allauth, htmx, CSP and static-file middleware have nothing to do for it: the key
  decides. It runs ``settings.RETASC_API_KEY_MIDDLEWARE``, a subset of ``MIDDLEWARE`` in
  the same order. Every other request (the Dash, and API calls that carry a session
  cookie, with DRF's CSRF check on their writes) runs the whole chain.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler

API_KEY_PREFIX = "/api/v1/"

# Idle request threads kept for reuse; beyond this many, a finished request's thread ends.
_IDLE_THREADS = 64


def key_only(request) -> bool:
    """An /api/v1/ request that only a key or token can authenticate (see above)."""
    return (
        request.path.startswith(API_KEY_PREFIX)
        and "HTTP_AUTHORIZATION" in request.META
        and settings.SESSION_COOKIE_NAME not in request.COOKIES
    )


class _ThreadFreeList:
    def __init__(self, keep: int):
        self.keep = keep
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)


class _KeyChain(BaseHandler):
    """The middleware chain for API requests that carry a key (built like Django's)."""

    def __init__(self, middleware: list[str]):
        super().__init__()
        self._middleware = middleware

    def load_middleware(self, is_async=False):
        # Django builds a chain from settings.MIDDLEWARE: name the subset there while this
        # one is built (once, at start-up, before any request is served).
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = self._middleware
        try:
            super().load_middleware(is_async=False)
        finally:
            settings.MIDDLEWARE = full


class SyncASGIHandler(ASGIHandler):
    threads = _ThreadFreeList(_IDLE_THREADS)

    def __init__(self):
        super().__init__()
        key_middleware = list(getattr(settings, "RETASC_API_KEY_MIDDLEWARE", settings.MIDDLEWARE))
        unknown = [m for m in key_middleware if m not in settings.MIDDLEWARE]
        if unknown or key_middleware != [m for m in settings.MIDDLEWARE if m in key_middleware]:
            raise ImproperlyConfigured("RETASC_API_KEY_MIDDLEWARE must be a subset of MIDDLEWARE, in its order.")
        self.key_chain = _KeyChain(key_middleware)
        self.key_chain.load_middleware()

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)

    def get_response(self, request):
        if key_only(request):
            return self.key_chain.get_response(request)
        return super().get_response(request)

    async def get_response_async(self, request):
        # thread_sensitive: the request's own thread (the ThreadSensitiveContext of
        # __call__), so requests do not queue behind each other.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def get_asgi_application() -> SyncASGIHandler:
    django.setup(set_prefix=False)
    return SyncASGIHandler()
