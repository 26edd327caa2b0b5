"""The periodic jobs: the same services run from Celery beat and in-process."""

from datetime import timedelta

from apps.issues.models import Activity, Issue
from apps.leases import services as leases
from apps.leases.tasks import reclaim_expired_task
from retasc import jobs
from tests.conftest import new_issue


def test_beat_schedules_reclaim_and_escalation_from_code(settings):
    """On the real Celery app: a receiver of on_after_configure that raises is swallowed
    by the signal, and beat then runs with an empty schedule (no job ever ran)."""
    from celery import Celery

    from retasc.celery import app, setup_periodic_tasks

    every = settings.RETASC_RECLAIM_INTERVAL_SECONDS
    want = {
        "reclaim expired leases": "apps.leases.tasks.reclaim_expired_task",
        "SLA escalation": "apps.issues.tasks.sla_escalate_task",
        "connector writeback": "apps.intake.tasks.writeback_task",
        "deliver notifications": "apps.notifications.tasks.deliver_task",
        "SLA breaching notices": "apps.notifications.tasks.sla_breaching_task",
    }
    schedule = app.conf.beat_schedule  # configures the app: the receiver has run
    assert {name: entry["task"] for name, entry in schedule.items()} == want
    assert {name: entry["schedule"] for name, entry in schedule.items()} == {
        **dict.fromkeys(want, every),
        "deliver notifications": settings.RETASC_NOTIFY_INTERVAL_SECONDS,
    }

    fresh = Celery("check", set_as_current=False)
    setup_periodic_tasks(fresh)  # called directly, errors are not swallowed
    assert {name: entry["task"] for name, entry in fresh.conf.beat_schedule.items()} == want


def test_reclaim_task_and_inprocess_runner_write_the_receipt_once(world, clock):
    issue = new_issue(world.a, "Work")
    leases.next_issue(actor=world.a)
    clock.advance(seconds=world.org.lease_ttl + 1)

    assert reclaim_expired_task.apply().get() == 1  # Celery task, run eagerly
    assert jobs.run_once() == {"reclaimed": 0, "escalated": 0, "writebacks": 0, "slaNotices": 0}  # idempotent: nothing left

    row = Issue.objects.get(pk=issue.pk)
    assert (row.status, row.reclaim_count, row.lease_claim_id) == ("todo", 1, None)
    assert list(Activity.objects.filter(issue=issue, verb="reclaimed").values_list("verb", flat=True)) == ["reclaimed"]


def test_inprocess_runner_applies_due_sla_escalations(world, clock):
    issue = new_issue(world.a, "Due soon", priority=4, due_at=(clock.now + timedelta(hours=10)).isoformat())
    assert Issue.objects.get(pk=issue.pk).effective_rank == 4
    clock.advance(hours=8)  # 80 % of the window used: warning, floored at high
    assert jobs.run_once()["escalated"] == 1
    assert Issue.objects.get(pk=issue.pk).effective_rank == 2
