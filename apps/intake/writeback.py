"""Writeback (SPEC §9): when an issue synced from a connector becomes done or canceled,
close the source issue through the provider's API and comment once with the identifier.

1. ``jobs_for_unit`` runs inside the closing action's transaction (called by the unit
   of work's writer): it writes a ``WritebackJob`` row per closed synced issue, so
   nothing is lost while the worker is down, and asks for a wake-up after commit.
2. ``writeback_run`` (a Celery task in the scaled mode, the in-process runner in the
   embedded mode) takes each due job with a conditional update (another worker that
   got there first is skipped; no lock is held across the provider call), then calls
   the provider: comment unless a comment already carries the marker, close unless
   already closed. Idempotent, so a redelivered task or a retry after a lost answer
   writes nothing twice.
3. A failure is retried with exponential backoff, waiting at least as long as the
   provider's ``Retry-After`` / rate-limit reset; a permanent refusal (bad token, no
   access) or too many attempts fails the job. Failures show on the connector page.
It never blocks or fails the Retasc action: the action only writes a row.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from apps.intake.github import GitHubClient
from apps.intake.gitlab import GitLabClient
from apps.intake.http import ProviderError
from apps.intake.models import Connector, Provider, SourceIssue, WritebackJob
from apps.issues.models import Status

PROVIDERS = frozenset(Provider.values)

log = logging.getLogger(__name__)

IN_FLIGHT_SECONDS = 300  # a taken job is not taken again for this long (a crashed worker's job returns)
_waker = None


def set_waker(fn) -> None:
    """Installed by the composition root: how to wake the worker after commit (the
    in-process runner's event, or a Celery ``delay``). Without one, the periodic run
    picks the job up."""
    global _waker
    _waker = fn


def wake() -> None:
    if _waker is not None:
        try:
            _waker()
        except Exception:  # the broker being down must not matter: the periodic run catches up
            log.warning("could not wake the writeback worker; the periodic run will", exc_info=True)


def _closing(changes: dict) -> str | None:
    status = changes.get("status")
    if isinstance(status, list) and len(status) == 2 and status[1] in (Status.DONE, Status.CANCELED):
        return status[1]
    return None


def _origin(entry) -> str | None:
    # Read only when loaded (a deferred field would cost a query on every action).
    return entry.subject.__dict__.get("source") if entry.subject is not None else None


def jobs_for_unit(unit) -> int:
    """Inside the action's transaction: a job for each synced issue it closed."""
    # Only issues a connector brought in are written back. When the receipt's issue row
    # has its origin (``source``) loaded and it is not a provider, skip it: an agent's own
    # work (every claim + finish) costs no query here. An unknown origin is looked up.
    closing = {
        entry.issue_id: _closing(entry.changes) for entry in unit.entries if _origin(entry) is None or _origin(entry) in PROVIDERS
    }
    closing = {issue_id: status for issue_id, status in closing.items() if status and issue_id}
    if not closing:
        return 0
    links = SourceIssue.objects.filter(
        issue_id__in=list(closing), upstream_open=True, connector__revoked_at__isnull=True
    ).select_related("issue__project")
    jobs, now = [], timezone.now()
    for link in links:
        if WritebackJob.objects.filter(source=link, state=WritebackJob.State.PENDING).exists():
            continue
        status = closing[link.issue_id]
        jobs.append(
            WritebackJob(
                org_id=link.org_id,
                connector_id=link.connector_id,
                source=link,
                identifier=link.issue.identifier,
                reason="completed" if status == Status.DONE else "not_planned",
                created_at=now,
                next_attempt_at=now,
            )
        )
    if jobs:
        WritebackJob.objects.bulk_create(jobs)
        unit.on_commit(wake)
    return len(jobs)


def _client(connector: Connector):
    cls = GitHubClient if connector.provider == Provider.GITHUB else GitLabClient
    return cls(api_url=connector.api_url, token=connector.token)


def comment_text(job: WritebackJob) -> tuple[str, str]:
    marker = f"<!-- retasc:{job.identifier} -->"
    word = "done" if job.reason == "completed" else "canceled"
    return marker, f"Closed from Retasc: {job.identifier} is {word}.\n\n{marker}"


def backoff(attempts: int, retry_after: float | None) -> float:
    base = settings.RETASC_WRITEBACK_BACKOFF_SECONDS * (2 ** max(0, attempts - 1))
    wait = min(base, settings.RETASC_WRITEBACK_BACKOFF_MAX_SECONDS)
    return max(wait, retry_after or 0.0)


def writeback_run(*, limit: int = 50) -> int:
    """Run the due jobs once. Returns how many closed their source issue."""
    now = timezone.now()
    due = list(
        WritebackJob.objects.filter(state=WritebackJob.State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(_attempt(pk, now) for pk in due)


def _attempt(pk: int, now) -> int:
    taken = WritebackJob.objects.filter(pk=pk, state=WritebackJob.State.PENDING, next_attempt_at__lte=now).update(
        attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=IN_FLIGHT_SECONDS)
    )
    if not taken:
        return 0  # another worker got there first
    job = WritebackJob.objects.select_related("connector", "source").get(pk=pk)
    connector = job.connector
    if connector.revoked_at is not None:
        _fail(job, "The connector was revoked.", now)
        return 0
    marker, text = comment_text(job)
    try:
        with _client(connector) as client:
            client.close_with_comment(connector.repo, job.source.number, marker=marker, comment=text, state_reason=job.reason)
    except ProviderError as exc:
        _retry_or_fail(job, exc, now)
        return 0
    WritebackJob.objects.filter(pk=pk).update(state=WritebackJob.State.DONE, finished_at=timezone.now(), last_error="")
    SourceIssue.objects.filter(pk=job.source_id).update(upstream_open=False)
    Connector.objects.filter(pk=connector.pk).update(
        writebacks_count=F("writebacks_count") + 1, last_error="", last_error_at=None
    )
    return 1


def _retry_or_fail(job: WritebackJob, exc: ProviderError, now) -> None:
    message = f"{job.identifier}: {exc.message}"
    if exc.permanent or job.attempts >= settings.RETASC_WRITEBACK_MAX_ATTEMPTS:
        _fail(job, message, now)
        return
    wait = backoff(job.attempts, exc.retry_after)
    WritebackJob.objects.filter(pk=job.pk).update(last_error=message[:500], next_attempt_at=now + timedelta(seconds=wait))
    Connector.objects.filter(pk=job.connector_id).update(
        last_error=f"{message} Retrying in {round(wait)} s."[:500], last_error_at=now
    )


def _fail(job: WritebackJob, message: str, now) -> None:
    WritebackJob.objects.filter(pk=job.pk).update(state=WritebackJob.State.FAILED, last_error=message[:500], finished_at=now)
    Connector.objects.filter(pk=job.connector_id).update(last_error=f"{message} Gave up."[:500], last_error_at=now)
