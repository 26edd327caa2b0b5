"""Celery tasks (the scaled mode): thin, idempotent, over the delivery service."""

from celery import shared_task

from apps.notifications.delivery import deliver_due
from apps.notifications.events import sla_breaching_scan


@shared_task(name="apps.notifications.tasks.deliver_task", ignore_result=True)
def deliver_task() -> dict:
    # Redelivered or run twice at once: each delivery is taken by one conditional update.
    return deliver_due()


@shared_task(name="apps.notifications.tasks.sla_breaching_task", ignore_result=True)
def sla_breaching_task() -> int:
    return sla_breaching_scan()
