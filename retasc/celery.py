"""Celery app. Used when REDIS_URL is set; the embedded mode runs the same jobs in-process.

Task signals (third-party hooks, STYLE §7) carry the request id from the publishing
request into the task's log lines (a task header) and count job runs and failures
(``apps.core.metrics``).
"""

import logging
import os
import time

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun
from django.conf import settings

from apps.core import logs, metrics

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retasc.settings.base")

app = Celery("retasc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["apps.leases", "apps.issues", "apps.intake", "apps.notifications"])

REQUEST_ID_HEADER = "retasc_request_id"
log = logging.getLogger("retasc.jobs")


@app.on_after_configure.connect
def setup_periodic_tasks(sender, **kwargs):
    every = settings.RETASC_RECLAIM_INTERVAL_SECONDS
    # A signature, not a bare task name: Celery reads ``sig.name``, and an exception here is
    # swallowed by the signal (beat then runs with an empty schedule).
    sender.add_periodic_task(every, sender.signature("apps.leases.tasks.reclaim_expired_task"), name="reclaim expired leases")
    sender.add_periodic_task(every, sender.signature("apps.issues.tasks.sla_escalate_task"), name="SLA escalation")
    sender.add_periodic_task(every, sender.signature("apps.intake.tasks.writeback_task"), name="connector writeback")
    notify = settings.RETASC_NOTIFY_INTERVAL_SECONDS
    sender.add_periodic_task(notify, sender.signature("apps.notifications.tasks.deliver_task"), name="deliver notifications")
    sender.add_periodic_task(every, sender.signature("apps.notifications.tasks.sla_breaching_task"), name="SLA breaching notices")


@before_task_publish.connect
def carry_request_id(headers=None, **kwargs):
    """A task published while serving a request carries that request's id."""
    rid = logs.request_id.get()
    if rid and headers is not None:
        headers.setdefault(REQUEST_ID_HEADER, rid)


# task id -> (request-id context token, start time); one entry per task running in this process.
_running: dict = {}


def job_name(task) -> str:
    return task.name.rsplit(".", 1)[-1].removesuffix("_task")


@task_prerun.connect
def task_started(task_id=None, task=None, **kwargs):
    # The publisher's id when there was one (a worker reads it from the message headers;
    # ``apply(headers=...)`` keeps them apart); in eager mode the caller's context
    # already has it; a beat-scheduled run is known by its task id.
    request = task.request
    carried = getattr(request, REQUEST_ID_HEADER, None) or (getattr(request, "headers", None) or {}).get(REQUEST_ID_HEADER)
    rid = carried or logs.request_id.get() or str(task_id)
    _running[task_id] = (logs.request_id.set(logs.accept_request_id(rid)), time.perf_counter())


@task_postrun.connect
def task_finished(task_id=None, task=None, state=None, **kwargs):
    token, started = _running.pop(task_id, (None, None))
    name = job_name(task)
    metrics.job_runs.labels(name).inc()
    if state != "SUCCESS":
        metrics.job_failures.labels(name).inc()
    elapsed = time.perf_counter() - started if started is not None else 0.0
    metrics.job_latency.labels(name).observe(elapsed)
    log.info("job %s %s in %.1fms", name, str(state).lower(), elapsed * 1000)
    if token is not None:
        logs.request_id.reset(token)
