"""How Django requests run under Daphne.

``SyncASGIHandler`` is Django's ASGI handler with one change: the middleware chain and
the view run as one synchronous call, in the request's own worker thread, entered once
per request. Stock Django builds the chain for async use: under ASGI its innermost
handler is async, so a chain of sync-only middleware (WhiteNoise is one) hops from a
worker thread to the event loop and back to a thread for every request, and
async-capable middleware hop to a thread for each ``process_request`` and
``process_response``. Every hop waits for a busy event loop or for the GIL; under load
those waits were a large share of a request's time (docs/benchmarks.md). Every view and
middleware here is synchronous, so nothing is lost.
"""

from __future__ import annotations

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class SyncASGIHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        # thread_sensitive: the per-request thread ASGIHandler.handle sets up (a
        # ThreadSensitiveContext per request), so requests do not queue behind each other.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def get_asgi_application() -> SyncASGIHandler:
    django.setup(set_prefix=False)
    return SyncASGIHandler()
