"""Django's Redis cache with one connection pool per process.

Django keeps a cache object per context (``CacheHandler`` is a context-local
``BaseConnectionHandler``), and under ASGI every request is a context of its own: each
request built a new ``RedisCache``, a new client with new connection pools, and so opened
a new TCP connection to Redis for its rate-limit check. That cost an API request 3-4 ms
of CPU (`bench.request_cost`, docs/benchmarks.md). Here the client, and with it the
pools, is shared by every cache object of the process with the same servers and options;
redis-py's pools are thread-safe and start afresh in a forked child.
"""

from __future__ import annotations

import threading

from django.core.cache.backends.redis import RedisCache
from django.utils.functional import cached_property

_clients: dict = {}
_lock = threading.Lock()


class SharedRedisCache(RedisCache):
    @cached_property
    def _cache(self):
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = self._class(self._servers, **self._options)
        return client
