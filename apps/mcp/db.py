"""Database access from MCP worker threads.

Tools run on anyio worker threads and the key check on a thread pool, outside Django's
request cycle, so each call opens and closes its own connection (``close_old_connections``
before and after, as a request would) and no thread keeps a broken one.

SQLite (the embedded mode: one Daphne process) has a single writer, and every tool call
writes (reads are metered in the ledger). Left to SQLite's busy handler, 24 agents pulling
at once poll for the lock unfairly and some give up after the 30 s timeout ("database is
locked"). So on SQLite the calls of this process take turns on one in-process lock
instead: they queue in memory, without a deadline. PostgreSQL needs no such turn.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from django.db import close_old_connections, connection

_sqlite_turn = threading.Lock()


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
