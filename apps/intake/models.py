"""Connectors (one upstream repository -> one project), their delivery log, the upstream
issues they synced in, and the durable writeback jobs (SPEC §9)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.sealed import Sealed


class Provider(models.TextChoices):
    GITHUB = "github", "GitHub"
    GITLAB = "gitlab", "GitLab"


class Connector(models.Model):
    """Ties one repository of a provider to one project. The webhook secret and the
    provider token are sealed with the org's data key, like other content."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="connectors")
    project = models.ForeignKey("orgs.Project", on_delete=models.CASCADE, related_name="connectors")
    provider = models.CharField(max_length=10, choices=Provider.choices)
    repo = models.CharField(max_length=255, help_text="owner/name (GitLab: the project's full path).")
    api_url = models.CharField(max_length=500)
    secret_enc = models.BinaryField()
    secret = Sealed()
    token_enc = models.BinaryField(null=True)
    token = Sealed()
    pr_sync = models.BooleanField(default=False)
    live = models.BooleanField(default=False, help_text="A verified delivery (or GitHub's ping) has arrived.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_delivery_at = models.DateTimeField(null=True, blank=True)
    deliveries_count = models.PositiveIntegerField(default=0)
    issues_count = models.PositiveIntegerField(default=0)
    writebacks_count = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "created_at"], name="connector_org")]

    def __str__(self) -> str:
        return f"{self.provider}:{self.repo} -> {self.project_id}"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class Delivery(models.Model):
    """One inbound webhook delivery and what it did. Unique per (connector, delivery id):
    a repeat is answered 200 and writes nothing."""

    class Outcome(models.TextChoices):
        RECEIVED = "received"  # being processed
        APPLIED = "applied"
        IGNORED = "ignored"
        ERROR = "error"

    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="deliveries")
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    delivery_id = models.CharField(max_length=100)
    event = models.CharField(max_length=60)
    action = models.CharField(max_length=60, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.RECEIVED)
    issue = models.CharField(max_length=40, blank=True, help_text="The Retasc identifier it touched.")
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["connector", "delivery_id"], name="delivery_unique")]
        indexes = [models.Index(fields=["connector", "-received_at"], name="delivery_recent")]

    def __str__(self) -> str:
        return f"{self.event}/{self.action} {self.delivery_id}"


class SourceIssue(models.Model):
    """One upstream issue is always one Retasc issue: keyed by the provider's id."""

    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="source_issues")
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    upstream_id = models.CharField(max_length=40)
    number = models.PositiveBigIntegerField(help_text="GitHub's issue number; GitLab's iid.")
    issue = models.OneToOneField("issues.Issue", on_delete=models.CASCADE, related_name="source_link")
    upstream_open = models.BooleanField(default=True)
    url = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["connector", "upstream_id"], name="source_issue_unique")]

    def __str__(self) -> str:
        return f"{self.connector_id}#{self.number}"


class WritebackJob(models.Model):
    """Close the source issue (and comment once) after its Retasc issue closed.

    Written in the same transaction as the closing action, so nothing is lost while the
    worker is down; a worker takes a due job with a conditional update (no lock is held
    across the provider call) and retries with backoff."""

    class State(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        FAILED = "failed"

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="writebacks")
    source = models.ForeignKey(SourceIssue, on_delete=models.CASCADE, related_name="writebacks")
    identifier = models.CharField(max_length=40)
    reason = models.CharField(max_length=20, help_text="completed | not_planned")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(state="pending"), name="writeback_due")]

    def __str__(self) -> str:
        return f"writeback {self.identifier} ({self.state})"


class ImportSource(models.TextChoices):
    LINEAR = "linear", "Linear"
    RETASC = "retasc", "Retasc export"
    BEADS = "beads", "beads JSONL"


class ImportJob(models.Model):
    """One import of a backlog (SPEC §9): its progress, counts, errors and summary.

    ``params`` never holds a secret. A file import keeps its upload sealed with the org's
    data key until the job ends (so an interrupted run resumes from it); a Linear import
    handed to a Celery worker keeps the API key sealed in ``secret`` only while the job
    runs, and wipes it when the job ends. ``checkpoint`` is where a resumed run starts
    (Linear's page cursors, the file records already written)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    MAX_ERRORS = 100

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=10, choices=ImportSource.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    params = models.JSONField(default=dict, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    total = models.PositiveIntegerField(null=True, blank=True)
    done = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    summary = models.CharField(max_length=500, blank=True)
    checkpoint = models.JSONField(default=dict, blank=True)
    upload_enc = models.BinaryField(null=True, blank=True)
    upload = Sealed(kind="bytes")
    secret_enc = models.BinaryField(null=True, blank=True)
    secret = Sealed()
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Moves with every committed batch: a running job that stopped moving was interrupted.
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["org", "-created_at"], name="import_job_org")]

    def __str__(self) -> str:
        return f"import {self.source} {self.pk} ({self.status})"


class ImportedRecord(models.Model):
    """An upstream record already imported: (org, source, kind, external id) -> the Retasc
    row it became. Re-imports reconcile by it (update instead of duplicate) and an
    interrupted run recognizes what it already wrote. ``digest`` is a keyed hash (the
    org's search key) of the normalized record, so an unchanged record is skipped without
    reading or storing its content."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=10, choices=ImportSource.choices)
    kind = models.CharField(max_length=12)
    external_id = models.CharField(max_length=255)
    object_id = models.CharField(max_length=64)
    digest = models.CharField(max_length=64, blank=True)
    job = models.ForeignKey(ImportJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "source", "kind", "external_id"], name="imported_record_unique"),
        ]
        indexes = [models.Index(fields=["org", "kind", "object_id"], name="imported_record_object")]

    def __str__(self) -> str:
        return f"{self.source}:{self.kind}:{self.external_id} -> {self.object_id}"
