from celery import shared_task

from apps.issues.ranking import sla_escalate


@shared_task(name="apps.issues.tasks.sla_escalate_task")
def sla_escalate_task() -> int:
    return sla_escalate()
