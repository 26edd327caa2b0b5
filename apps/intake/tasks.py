from celery import shared_task

from apps.intake.imports.services import import_run
from apps.intake.writeback import writeback_run


@shared_task(name="apps.intake.tasks.writeback_task")
def writeback_task() -> int:
    return writeback_run()


@shared_task(name="apps.intake.tasks.import_task")
def import_task(job_id: str) -> str:
    """The scaled mode's import worker: the Linear key (if any) is sealed in the job row."""
    return import_run(job_id).status
