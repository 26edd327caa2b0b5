"""The schedule of periodic jobs, and the runner inside the server process (the embedded
mode, no Celery needed). The scaled mode runs the same jobs from Celery beat (retasc.celery).

The same services the Celery tasks call run here on a timer thread. Correctness never
depends on them: dispatch treats expired leases as free and applies due SLA escalations
itself; these jobs only write the receipts and ranks promptly.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections

from apps.core import metrics
from apps.intake import writeback
from apps.intake.tasks import writeback_task
from apps.issues.ranking import sla_escalate
from apps.leases.services import reclaim_expired
from apps.notifications import events as notification_events
from apps.notifications.delivery import deliver_due

log = logging.getLogger(__name__)
_started = threading.Event()
_wake = threading.Event()


JOBS = {
    "reclaim_expired": reclaim_expired,
    "sla_escalate": sla_escalate,
    "writeback": writeback.writeback_run,
    "sla_notices": notification_events.sla_breaching_scan,
}


def run_once() -> dict:
    """Each job once, in order; each counted in /metrics (runs, failures, time). One
    failing job does not stop the others; the first failure is raised after them."""
    done, failed = {}, None
    for name, job in JOBS.items():
        try:
            with metrics.job_observed(name):
                done[name] = job()
        except Exception as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return {
        "reclaimed": done.get("reclaim_expired"),
        "escalated": done.get("sla_escalate"),
        "writebacks": done.get("writeback"),
        "slaNotices": done.get("sla_notices"),
    }


def notify_once() -> dict:
    with metrics.job_observed("deliver_notifications"):
        return deliver_due()


def install_waker() -> None:
    """After an action commits a writeback job, wake the worker now instead of at the
    next tick: the in-process runner (embedded) or a Celery task (scaled)."""
    if settings.RETASC_INPROCESS_JOBS:
        writeback.set_waker(_wake.set)
    elif settings.REDIS_URL:
        writeback.set_waker(writeback_task.delay)


def start_inprocess_jobs() -> bool:
    if _started.is_set() or not settings.RETASC_INPROCESS_JOBS:
        return False
    _started.set()
    interval = settings.RETASC_RECLAIM_INTERVAL_SECONDS

    def loop():
        while True:
            _wake.wait(interval)
            _wake.clear()
            try:
                run_once()
            except Exception:
                log.exception("background job failed; will retry")
            finally:
                close_old_connections()

    threading.Thread(target=loop, name="retasc-jobs", daemon=True).start()

    # Notification delivery: every few seconds, and at once after a commit that wrote
    # outbox rows (the wake-up only shortens the wait; the rows are in the database).
    wake = threading.Event()
    notification_events.on_outbox(wake.set)

    def notify_loop():
        while True:
            wake.wait(settings.RETASC_NOTIFY_INTERVAL_SECONDS)
            wake.clear()
            try:
                notify_once()
            except Exception:
                log.exception("notification delivery failed; will retry")
            finally:
                close_old_connections()

    threading.Thread(target=notify_loop, name="retasc-notify", daemon=True).start()
    return True
