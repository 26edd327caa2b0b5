from celery import shared_task

from apps.leases.services import reclaim_expired


@shared_task(name="apps.leases.tasks.reclaim_expired_task")
def reclaim_expired_task() -> int:
    return reclaim_expired()
