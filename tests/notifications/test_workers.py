"""The two ways the worker runs (the in-process job, the Celery task), and a wake-up that
fails (Redis down) never failing the action: the rows wait for the periodic run."""

from __future__ import annotations

from apps.issues.models import Issue
from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.notifications import events
from apps.notifications.models import Delivery, Outbox
from apps.notifications.tasks import deliver_task
from retasc import jobs
from tests.conftest import new_issue


def finished_for_the_member(net):
    issue = new_issue(net.w.b, "Worker test")
    claim = leases.claim_issue(actor=net.w.a, identifier=issue.identifier)
    issue_update(actor=net.w.a, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])
    return issue


def test_the_in_process_job_sends(net):
    net.bind_telegram(net.w.member, 2)
    finished_for_the_member(net)
    assert jobs.notify_once()["sent"] == 1
    assert len(net.f.telegram.texts_to(2)) == 1


def test_the_celery_task_sends_and_a_second_run_sends_nothing_twice(net):
    net.bind_telegram(net.w.member, 2)
    finished_for_the_member(net)
    assert deliver_task.apply().get()["sent"] == 1
    assert deliver_task.apply().get()["sent"] == 0
    assert len(net.f.telegram.delivered) == 1


def test_a_broken_wake_up_never_fails_the_action(net, monkeypatch, django_capture_on_commit_callbacks):
    net.bind_telegram(net.w.member, 2)

    def broker_down():
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(events, "_wakers", [broker_down])
    with django_capture_on_commit_callbacks(execute=True):
        issue = finished_for_the_member(net)
    assert Issue.objects.get(pk=issue.pk).status == "done"  # committed
    assert Outbox.objects.count() == 1  # the row waits for the periodic run
    jobs.notify_once()
    assert Delivery.objects.get().status == "sent"
