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

from apps.issues.ranking import sla_escalate
from apps.leases.services import reclaim_expired
from apps.notifications import events as notification_events
from apps.notifications.delivery import deliver_due

log = logging.getLogger(__name__)
_started = threading.Event()


def run_once() -> dict:
    return {"reclaimed": reclaim_expired(), "escalated": sla_escalate(), "slaNotices": notification_events.sla_breaching_scan()}


def notify_once() -> dict:
    return deliver_due()


def start_inprocess_jobs() -> bool:
    if _started.is_set() or not settings.RETASC_INPROCESS_JOBS:
        return False
    _started.set()
    interval = settings.RETASC_RECLAIM_INTERVAL_SECONDS

    def loop():
        stop = threading.Event()
        while not stop.wait(interval):
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
