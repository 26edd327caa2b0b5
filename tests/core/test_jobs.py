"""The periodic jobs: the same services run from Celery beat and in-process."""

from datetime import timedelta

from apps.core import jobs
from apps.issues.models import Activity, Issue
from apps.leases import services as leases
from apps.leases.tasks import reclaim_expired_task
from tests.conftest import new_issue


def test_beat_schedules_reclaim_and_escalation_from_code(settings):
    from retasc.celery import setup_periodic_tasks

    scheduled = []

    class Sender:
        def add_periodic_task(self, every, task, name):
            scheduled.append((every, task, name))

    setup_periodic_tasks(Sender())
    every = settings.RETASC_RECLAIM_INTERVAL_SECONDS
    assert scheduled == [
        (every, "apps.leases.tasks.reclaim_expired_task", "reclaim expired leases"),
        (every, "apps.issues.tasks.sla_escalate_task", "SLA escalation"),
    ]


def test_reclaim_task_and_inprocess_runner_write_the_receipt_once(world, clock):
    issue = new_issue(world.a, "Work")
    leases.next_issue(actor=world.a)
    clock.advance(seconds=world.org.lease_ttl + 1)

    assert reclaim_expired_task.apply().get() == 1  # Celery task, run eagerly
    assert jobs.run_once() == {"reclaimed": 0, "escalated": 0}  # idempotent: nothing left

    row = Issue.objects.get(pk=issue.pk)
    assert (row.status, row.reclaim_count, row.lease_claim_id) == ("todo", 1, None)
    assert list(Activity.objects.filter(issue=issue, verb="reclaimed").values_list("verb", flat=True)) == ["reclaimed"]


def test_inprocess_runner_applies_due_sla_escalations(world, clock):
    issue = new_issue(world.a, "Due soon", priority=4, due_at=(clock.now + timedelta(hours=10)).isoformat())
    assert Issue.objects.get(pk=issue.pk).effective_rank == 4
    clock.advance(hours=8)  # 80 % of the window used: warning, floored at high
    assert jobs.run_once()["escalated"] == 1
    assert Issue.objects.get(pk=issue.pk).effective_rank == 2
