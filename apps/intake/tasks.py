from celery import shared_task

from apps.intake.writeback import writeback_run


@shared_task(name="apps.intake.tasks.writeback_task")
def writeback_task() -> int:
    return writeback_run()
