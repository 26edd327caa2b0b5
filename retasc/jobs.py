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

log = logging.getLogger(__name__)
_started = threading.Event()


def run_once() -> dict:
    return {"reclaimed": reclaim_expired(), "escalated": sla_escalate()}


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
    return True
