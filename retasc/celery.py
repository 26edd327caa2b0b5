"""Celery app. Used when REDIS_URL is set; the embedded mode runs the same jobs in-process."""

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retasc.settings.base")

app = Celery("retasc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["apps.leases", "apps.issues", "apps.notifications"])


@app.on_after_configure.connect
def setup_periodic_tasks(sender, **kwargs):
    every = settings.RETASC_RECLAIM_INTERVAL_SECONDS
    # A signature, not a bare task name: Celery reads ``sig.name``, and an exception here is
    # swallowed by the signal (beat then runs with an empty schedule).
    sender.add_periodic_task(every, sender.signature("apps.leases.tasks.reclaim_expired_task"), name="reclaim expired leases")
    sender.add_periodic_task(every, sender.signature("apps.issues.tasks.sla_escalate_task"), name="SLA escalation")
    notify = settings.RETASC_NOTIFY_INTERVAL_SECONDS
    sender.add_periodic_task(notify, sender.signature("apps.notifications.tasks.deliver_task"), name="deliver notifications")
    sender.add_periodic_task(every, sender.signature("apps.notifications.tasks.sla_breaching_task"), name="SLA breaching notices")
