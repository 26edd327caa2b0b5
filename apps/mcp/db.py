"""Database access from MCP worker threads.

The key check and every tool call run on ``in_thread``: one pool of long-lived threads
(``MCP_THREADS``, as many as anyio's default limit for worker threads), entered with the
caller's context (the access token of the request travels in a context variable). Under
Daphne anyio's own worker threads were started and stopped once per request: anyio ties
a worker thread's life to its loop's "root" task, and Daphne's loop has none, so the
request's own task stood in for it.

These threads are outside Django's request cycle, so each call opens and closes its own
connection (``close_old_connections`` before and after, as a request would) and no
thread keeps a broken one.

SQLite (the embedded mode: one Daphne process) has a single writer, and every tool call
writes (reads are metered in the ledger). Left to SQLite's busy handler, 24 agents pulling
at once poll for the lock unfairly and some give up after the 30 s timeout ("database is
locked"). So on SQLite the calls of this process take turns on one in-process lock
instead: they queue in memory, without a deadline. PostgreSQL needs no such turn.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

_sqlite_turn = threading.Lock()

MCP_THREADS = 40
_threads = ThreadPoolExecutor(max_workers=MCP_THREADS, thread_name_prefix="mcp")


async def in_thread(fn, *args):
    """``fn(*args)`` on one of the MCP threads, in a copy of the caller's context."""
    return await sync_to_async(fn, thread_sensitive=False, executor=_threads)(*args)


@contextmanager
def database_turn():
    close_old_connections()
    try:
        if connection.vendor == "sqlite":
            with _sqlite_turn:
                yield
        else:
            yield
    finally:
        close_old_connections()
