"""Import jobs (SPEC §9): start, run (to the end, or until interrupted), resume, read.

``import_start`` checks everything it can up front (the caller is an owner, the file is
an export of a version this server reads or a beads JSONL, the Linear key works and the
teams exist), so a refusal writes nothing, then queues the job and hands it to the
background: a thread in the embedded mode, a Celery worker in the scaled mode (the
Linear key sealed with the org's data key in the job row, wiped when the job ends), or,
with neither (tests, operator commands), right after commit in this process.

``import_run`` runs a job to the end: batch after batch, each one transaction, each
followed by a progress event on the org's live group. An interrupted or failed job
resumes from its checkpoint when started again (the same file, or the same Linear teams
with the key given again): records already imported are recognized by external id.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from apps.core import events, search
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.formats import iso
from apps.core.unit import mutation
from apps.intake.http import ProviderError
from apps.intake.imports.beads_source import BeadsSource
from apps.intake.imports.importer import Importer
from apps.intake.imports.linear_source import LinearSource
from apps.intake.imports.records import SourceError
from apps.intake.imports.retasc_source import RetascSource
from apps.intake.models import ImportJob, ImportSource
from apps.orgs.actor import Actor
from apps.orgs.models import Membership, Org
from apps.orgs.services import owner_admin_only

log = logging.getLogger(__name__)

SOURCES = tuple(ImportSource.values)
MAX_UPLOAD_BYTES = 200 * 1024 * 1024
STALE_AFTER = timedelta(minutes=10)
COUNT_KEYS = (
    "projects",
    "issues",
    "comments",
    "labels",
    "relations",
    "attachments",
    "people",
    "created",
    "updated",
    "unchanged",
    "skipped",
    "errors",
)


# --- the job's shape ----------------------------------------------------------------------


def import_shape(job: ImportJob) -> dict:
    counts = job.counts or {}
    return {
        "importId": str(job.pk),
        "source": job.source,
        "status": job.status,
        "counts": {k: int(counts.get(k, 0)) for k in COUNT_KEYS},
        "total": job.total,
        "done": job.done,
        "errors": list(job.errors or [])[: ImportJob.MAX_ERRORS],
        "summary": job.summary or None,
        "createdAt": iso(job.created_at),
        "startedAt": iso(job.started_at),
        "finishedAt": iso(job.finished_at),
    }


def _publish(job: ImportJob) -> None:
    events.publish(job.org_id, [{"verb": "import.progress", "import": import_shape(job)}])


# --- reading --------------------------------------------------------------------------------


def import_get(*, actor: Actor, import_id) -> ImportJob:
    owner_admin_only(actor)
    try:
        pk = uuid.UUID(str(import_id))
    except ValueError:
        raise not_found("Import") from None
    job = ImportJob.objects.filter(pk=pk, org_id=actor.org.pk).first()
    if job is None:
        raise not_found("Import")
    return job


def import_list(*, actor: Actor, limit: int = 50) -> list[ImportJob]:
    owner_admin_only(actor)
    return list(ImportJob.objects.filter(org_id=actor.org.pk).defer("upload_enc").order_by("-created_at")[:limit])


# --- starting -------------------------------------------------------------------------------


def _source_for(job: ImportJob, *, api_key: str | None = None, upload: bytes | None = None):
    if job.source == ImportSource.LINEAR:
        return LinearSource(api_key=api_key or "", teams=(job.params or {}).get("teams") or [])
    data = upload if upload is not None else job.upload
    if data is None:
        raise SourceError("The uploaded file is no longer kept; start the import again with the file.")
    return RetascSource(data) if job.source == ImportSource.RETASC else BeadsSource(data)


def _fingerprint(org: Org, source: str, teams, upload: bytes | None) -> str:
    """What makes two starts the same import (to resume instead of starting over)."""
    if source == ImportSource.LINEAR:
        raw = ",".join(sorted(teams or [])).encode()
    else:
        raw = upload or b""
    return hmac.new(search.search_key(str(org.pk)), source.encode() + b"\0" + raw, hashlib.sha256).hexdigest()


def _teams(teams) -> list[str]:
    if teams is None:
        return []
    if isinstance(teams, str):
        teams = [teams]
    if not isinstance(teams, list) or not all(isinstance(t, str) and t.strip() for t in teams) or len(teams) > 50:
        raise invalid("teams", 'teams is a list of Linear team keys, like ["ENG"].')
    return sorted({t.strip().upper() for t in teams})


def _validate(*, source, api_key, teams, upload) -> list[str]:
    if source not in SOURCES:
        raise invalid("source", f"source is one of {', '.join(SOURCES)}.")
    if source == ImportSource.LINEAR:
        if not isinstance(api_key, str) or not api_key.strip():
            raise invalid("apiKey", "A Linear import needs apiKey, a Linear personal API key.")
        if upload is not None:
            raise invalid("file", "A Linear import reads from Linear; it takes no file.")
        return _teams(teams)
    if api_key:
        raise invalid("apiKey", f"A {source} import reads a file; it takes no apiKey.")
    if teams:
        raise invalid("teams", f"A {source} import reads a file; it takes no teams.")
    if not upload:
        raise invalid("file", f"A {source} import needs the file (multipart field file).")
    if len(upload) > MAX_UPLOAD_BYTES:
        raise invalid("file", f"The file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB.")
    return []


def import_start(
    *,
    actor: Actor,
    source,
    api_key=None,
    teams=None,
    upload: bytes | None = None,
    filename=None,
    launch: bool = True,
) -> ImportJob:
    """Queue an import (owner-only). Refusals (400 INVALID_ARGUMENT with the field, 403,
    409 when the same source is already importing) write nothing."""
    owner_admin_only(actor)
    source = (source or "").strip().lower() if isinstance(source, str) else source
    teams = _validate(source=source, api_key=api_key, teams=teams, upload=upload)
    org = actor.org
    # Up front: the file parses (right format and version), the key works, the teams exist.
    try:
        if source == ImportSource.LINEAR:
            probe = LinearSource(api_key=api_key, teams=teams)
            try:
                probe.check()
            finally:
                probe.close()
        elif source == ImportSource.RETASC:
            RetascSource(upload)
        else:
            BeadsSource(upload)
    except SourceError as exc:
        raise invalid(exc.field, exc.message) from None
    except ProviderError as exc:
        raise ServiceError("UNAVAILABLE", exc.message) from None
    fingerprint = _fingerprint(org, source, teams, upload)
    now = timezone.now()
    with mutation(actor, "import_start", charge=False) as unit:
        busy = (
            ImportJob.objects.select_for_update()
            .filter(org_id=org.pk, source=source, status__in=[ImportJob.Status.QUEUED, ImportJob.Status.RUNNING])
            .order_by("-created_at")
            .first()
        )
        if busy is not None and busy.updated_at > now - STALE_AFTER:
            raise ServiceError(
                "CONFLICT",
                f"An import from {ImportSource(source).label} is already under way ({busy.pk}); wait for it to finish.",
                importId=str(busy.pk),
            )
        # A failed or interrupted run of the same import resumes from its checkpoint.
        job = (
            ImportJob.objects.select_for_update()
            .filter(org_id=org.pk, source=source, params__fingerprint=fingerprint)
            .exclude(status=ImportJob.Status.DONE)
            .order_by("-created_at")
            .first()
        )
        resumed = job is not None
        if job is None:
            job = ImportJob(org=org, created_by_id=actor.principal_id, source=source)
            job.params = {"teams": teams, "filename": str(filename or "")[:200], "fingerprint": fingerprint}
        job.status = ImportJob.Status.QUEUED
        job.summary = ""
        job.finished_at = None
        job.updated_at = now
        if upload is not None:
            job.upload = upload
        scaled = not settings.RETASC_INPROCESS_JOBS and bool(settings.REDIS_URL)
        if source == ImportSource.LINEAR and scaled and launch:
            job.secret = api_key.strip()  # for the worker; wiped when the job ends
        job.save()
        unit.record(
            "import_started",
            changes={
                "import": {
                    "id": str(job.pk),
                    "source": source,
                    "teams": teams,
                    "filename": job.params.get("filename"),
                    "resumed": resumed,
                }
            },
        )
        if launch:
            key = api_key.strip() if isinstance(api_key, str) else None
            unit.on_commit(lambda: _launch(job.pk, key, scaled))
    return job


def _launch(job_id, api_key: str | None, scaled: bool) -> None:
    if settings.RETASC_INPROCESS_JOBS:
        threading.Thread(target=_run_in_thread, args=(job_id, api_key), name=f"retasc-import-{job_id}", daemon=True).start()
    elif scaled:
        from apps.intake.tasks import import_task  # defer: the task module imports this one

        import_task.delay(str(job_id))
    else:
        import_run(job_id, api_key=api_key)


def _run_in_thread(job_id, api_key) -> None:
    try:
        import_run(job_id, api_key=api_key)
    except Exception:  # the job row says what failed
        log.exception("import %s stopped", job_id)
    finally:
        close_old_connections()


# --- running --------------------------------------------------------------------------------


def _actor(job: ImportJob) -> Actor:
    org = Org.objects.get(pk=job.org_id)
    membership = None
    if job.created_by_id is not None:
        membership = Membership.objects.filter(org_id=org.pk, user_id=job.created_by_id).first()
    if membership is None:
        return Actor(org=org, principal_id=None, key=None, runtime="import")
    return Actor(org=org, principal_id=job.created_by_id, key=None, runtime="import", membership=membership)


def _summary(job: ImportJob) -> str:
    c = job.counts or {}
    parts = [
        f"{c.get('created', 0)} issues created",
        f"{c.get('updated', 0)} updated",
        f"{c.get('unchanged', 0)} unchanged",
        f"{c.get('comments', 0)} comments",
        f"{c.get('relations', 0)} relations",
        f"{c.get('attachments', 0)} attachments",
        f"{c.get('projects', 0)} projects",
        f"{c.get('people', 0)} placeholder people",
    ]
    text = ", ".join(parts)
    if c.get("errors"):
        text += f"; {c['errors']} records skipped with errors"
    return text + "."


def _finish(job: ImportJob, status: str, summary: str) -> None:
    job.status = status
    job.summary = summary[:500]
    job.finished_at = timezone.now()
    job.updated_at = job.finished_at
    job.secret = None  # the Linear key never outlives the run
    fields = ["status", "summary", "finished_at", "updated_at", "secret_enc"]
    if status == ImportJob.Status.DONE:
        job.upload = None  # the file's content is in the issues now; a done job keeps no copy
        fields.append("upload_enc")
    job.save(update_fields=fields)


def import_run(job_id, *, api_key: str | None = None, sleep=None) -> ImportJob:
    """Run the job to the end (or to its failure); resumes from its checkpoint."""
    job = ImportJob.objects.get(pk=job_id)
    now = timezone.now()
    # Taken with a conditional update: a job already running elsewhere (a redelivered
    # task, a second runner) is left to it unless it stopped moving.
    runnable = [ImportJob.Status.QUEUED, ImportJob.Status.FAILED]
    taken = (
        ImportJob.objects.filter(pk=job.pk)
        .filter(Q(status__in=runnable) | Q(status=ImportJob.Status.RUNNING, updated_at__lt=now - STALE_AFTER))
        .update(status=ImportJob.Status.RUNNING, updated_at=now)
    )
    if not taken:
        return job
    key = api_key or (job.secret if job.source == ImportSource.LINEAR else None)
    job.status = ImportJob.Status.RUNNING
    job.started_at = job.started_at or now
    job.updated_at = now
    job.save(update_fields=["started_at"])
    _publish(job)
    actor = _actor(job)
    source = None
    try:
        if job.source == ImportSource.LINEAR and not key:
            raise SourceError("The Linear API key is needed again to resume this import.", field="apiKey")
        source = _source_for(job, api_key=key)
        if sleep is not None and hasattr(source, "client"):
            source.client.sleep = sleep
        importer = Importer(job, actor)
        for batch in source.batches(dict(job.checkpoint or {})):
            if batch.total is not None:
                job.total = batch.total
            for record, message in batch.warnings:
                importer.error(record, message)
            importer.write_batch(
                people=batch.people,
                projects=batch.projects,
                labels=batch.labels,
                issues=batch.issues,
                relations=batch.relations,
                parents=batch.parents,
                checkpoint=batch.checkpoint,
            )
            _publish(job)
        importer.write_batch(final=True, checkpoint={"finished": True})
        if job.total is None or job.total < job.done:
            job.total = job.done
            ImportJob.objects.filter(pk=job.pk).update(total=job.total)
        _finish(job, ImportJob.Status.DONE, _summary(job))
        with mutation(actor, "import_finish", charge=False) as unit:
            unit.record("import_finished", changes={"import": {"id": str(job.pk), "source": job.source, "counts": job.counts}})
    except (SourceError, ProviderError) as exc:
        job.refresh_from_db(fields=["counts", "errors", "checkpoint", "done", "total"])
        message = exc.message
        if job.done:
            message += f" Stopped after {job.done} records; start the import again to resume."
        _finish(job, ImportJob.Status.FAILED, message)
    except Exception:
        log.exception("import %s failed", job.pk)
        job.refresh_from_db(fields=["counts", "errors", "checkpoint", "done", "total"])
        _finish(job, ImportJob.Status.FAILED, "The import stopped on an unexpected error; start it again to resume.")
    finally:
        if source is not None and hasattr(source, "close"):
            source.close()
        _publish(job)
    return job
