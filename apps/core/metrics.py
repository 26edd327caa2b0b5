"""Prometheus metric objects, shared by every interface (the view is ``apps.ops.views``).

One process: each process keeps its own samples in ``REGISTRY`` and serves them.

Several processes (N Daphne, Celery workers): set ``PROMETHEUS_MULTIPROC_DIR`` to an
empty directory every process can write, *before* start-up (prometheus-client reads it
at import). Each process then writes its samples to files there and a scrape in any
process sums them all (``prometheus_client.multiprocess``). Empty the directory when the
deployment restarts.

Labels never carry ids or secrets: routes are URL patterns (``api/v1/issues/<str:identifier>``),
tools and error codes come from fixed sets.
"""

from __future__ import annotations

import atexit
import os
import time
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
CONTENT_TYPE = CONTENT_TYPE_LATEST

# Where this process's metric objects register. In multiprocess mode they write to files
# and a scrape reads the files; registering them here too would count them twice.
REGISTRY = CollectorRegistry(auto_describe=True)
_target = None if MULTIPROCESS else REGISTRY
if not MULTIPROCESS:
    ProcessCollector(registry=REGISTRY)

# Seconds: from 5 ms (a cached read) to 30 s (the pool timeout).
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

http_requests = Counter(
    "retasc_http_requests",
    "HTTP requests answered, by URL pattern, method and status.",
    ["route", "method", "status"],
    registry=_target,
)
http_latency = Histogram(
    "retasc_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response, by URL pattern and method.",
    ["route", "method"],
    buckets=_LATENCY,
    registry=_target,
)
tool_calls = Counter(
    "retasc_mcp_tool_calls", "MCP tool calls, by tool and outcome (ok, refused, error).", ["tool", "outcome"], registry=_target
)
tool_latency = Histogram(
    "retasc_mcp_tool_duration_seconds", "Time an MCP tool call took, by tool.", ["tool"], buckets=_LATENCY, registry=_target
)
refusals = Counter(
    "retasc_refusals", "Refusals answered, by interface (api, mcp) and error code.", ["interface", "code"], registry=_target
)
claims = Counter("retasc_claims", "Claims taken (receipts with verb claimed).", registry=_target)
releases = Counter("retasc_releases", "Claims released by their holder (receipts with verb released).", registry=_target)
reclaims = Counter("retasc_reclaims", "Expired leases taken back (receipts with verb reclaimed).", registry=_target)
job_runs = Counter("retasc_job_runs", "Periodic job runs, by job.", ["job"], registry=_target)
job_failures = Counter("retasc_job_failures", "Periodic job runs that raised, by job.", ["job"], registry=_target)
job_latency = Histogram(
    "retasc_job_duration_seconds", "Time a periodic job run took, by job.", ["job"], buckets=_LATENCY, registry=_target
)
# Per process, last seen at the end of a request or at a scrape; summed over the live
# processes in multiprocess mode.
db_pool = Gauge(
    "retasc_db_pool_connections",
    "PostgreSQL pool connections of the server processes, by state (in_use, idle, waiting requests).",
    ["state"],
    multiprocess_mode="livesum",
    registry=_target,
)

_RECEIPT_COUNTERS = {"claimed": claims, "released": releases, "reclaimed": reclaims}


def count_receipts(verbs) -> None:
    """Count the receipts of one committed action (called after commit)."""
    for verb in verbs:
        counter = _RECEIPT_COUNTERS.get(verb)
        if counter is not None:
            counter.inc()


@contextmanager
def job_observed(job: str):
    """``with job_observed("reclaim_expired"): ...``: one run, its time, and a failure if it raises."""
    started = time.perf_counter()
    job_runs.labels(job).inc()
    try:
        yield
    except BaseException:
        job_failures.labels(job).inc()
        raise
    finally:
        job_latency.labels(job).observe(time.perf_counter() - started)


def set_db_pool(*, size: int, idle: int, waiting: int) -> None:
    db_pool.labels("in_use").set(max(0, size - idle))
    db_pool.labels("idle").set(idle)
    db_pool.labels("waiting").set(waiting)


def exposition(*collectors) -> bytes:
    """The Prometheus text for this deployment, plus ``collectors`` computed now (queue depth)."""
    if MULTIPROCESS:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_Forward(REGISTRY))
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)


class _Forward:
    """This process's registry inside a one-scrape registry (which also holds scrape-time collectors)."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self):
        return self.registry.collect()


def _mark_dead() -> None:
    # Drops this process's live gauges from the sums once it exits.
    multiprocess.mark_process_dead(os.getpid())


if MULTIPROCESS:
    atexit.register(_mark_dead)
