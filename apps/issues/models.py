from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.sealed import Sealed

USER = settings.AUTH_USER_MODEL


class Status(models.TextChoices):
    TODO = "todo"
    DOING = "doing"
    BLOCKED = "blocked"
    REVIEW = "review"
    DONE = "done"
    CANCELED = "canceled"


CLOSED = (Status.DONE, Status.CANCELED)
OPEN = (Status.TODO, Status.DOING, Status.BLOCKED, Status.REVIEW)
# Statuses dispatch may hand out (``blocked`` is a manual external wait: never).
DISPATCHABLE = (Status.TODO, Status.DOING, Status.REVIEW)


class Label(models.Model):
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="labels")
    name = models.CharField(max_length=60)
    color = models.CharField(max_length=7, default="#6b7280")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="label_unique")]

    def __str__(self) -> str:
        return self.name


class IssueQuerySet(models.QuerySet):
    def open(self):
        return self.exclude(status__in=CLOSED)

    def with_people(self):
        return self.select_related("project", "assignee", "author", "checkpoint", "checkpoint__author")


class Issue(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="issues")
    project = models.ForeignKey("orgs.Project", on_delete=models.CASCADE, related_name="issues")
    number = models.PositiveIntegerField()

    title_enc = models.BinaryField()
    body_enc = models.BinaryField(null=True)
    acceptance_enc = models.BinaryField(null=True)
    evidence_enc = models.BinaryField(null=True)
    cancel_reason_enc = models.BinaryField(null=True)
    no_dependency_enc = models.BinaryField(null=True)
    title = Sealed()
    body = Sealed()
    acceptance = Sealed(kind="json")
    evidence = Sealed(kind="json")
    cancel_reason = Sealed()
    no_dependency = Sealed()

    work = models.BooleanField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.TODO)
    priority = models.PositiveSmallIntegerField(default=0)
    due_at = models.DateTimeField(null=True, blank=True)
    assignee = models.ForeignKey(USER, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    author = models.ForeignKey(USER, null=True, on_delete=models.SET_NULL, related_name="+")
    author_key = models.ForeignKey("orgs.AgentKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The principal whose claim submitted the work for review: may not review it.
    submitted_by = models.ForeignKey(USER, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    review_requested_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    labels = models.ManyToManyField(Label, blank=True, related_name="issues")
    awaiting_triage = models.BooleanField(default=False)
    checkpoint = models.ForeignKey("issues.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reclaim_count = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=20, default="agent")
    source_ref = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    # Materialized dispatch order (apps.issues.ranking). Lower is more urgent:
    # 0 breached, 1 urgent, 2 high, 3 medium, 4 low, 5 none.
    base_rank = models.PositiveSmallIntegerField(default=5)
    effective_rank = models.PositiveSmallIntegerField(default=5)
    # effective_rank * 2, minus one for reviews: reviews sort ahead of todo at equal rank.
    dispatch_rank = models.PositiveSmallIntegerField(default=10)
    sla_next_at = models.DateTimeField(null=True, blank=True)
    rank_dirty = models.BooleanField(default=False)

    # The live lease, denormalized from Claim (below) so a pull is one indexed query.
    lease_claim_id = models.BigIntegerField(null=True, blank=True)
    lease_principal_id = models.BigIntegerField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    objects = IssueQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "number"], name="issue_number_unique")]
        indexes = [
            models.Index(
                fields=["project", "dispatch_rank", "created_at", "number"],
                condition=Q(work=True, awaiting_triage=False, status__in=["todo", "doing", "review"]),
                name="issue_dispatch",
            ),
            models.Index(fields=["lease_expires_at"], condition=Q(lease_expires_at__isnull=False), name="issue_lease"),
            models.Index(fields=["org", "sla_next_at"], condition=Q(sla_next_at__isnull=False), name="issue_sla_next"),
            models.Index(fields=["org"], condition=Q(rank_dirty=True), name="issue_rank_dirty"),
            models.Index(fields=["org", "status"], name="issue_org_status"),
            # list_issues without a query: newest first, the cursor on (created_at, id).
            models.Index(fields=["org", "-created_at", "-id"], name="issue_org_recent"),
        ]

    def __str__(self) -> str:
        return self.identifier

    @property
    def identifier(self) -> str:
        return f"{self.project.prefix}-{self.number}"

    @property
    def is_closed(self) -> bool:
        return self.status in CLOSED


class Relation(models.Model):
    class Type(models.TextChoices):
        BLOCKS = "blocks"
        RELATED = "related"
        DUPLICATE = "duplicate"

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="out_relations")
    target = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="in_relations")
    type = models.CharField(max_length=10, choices=Type.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "target", "type"], name="relation_unique"),
            models.CheckConstraint(condition=~Q(source=models.F("target")), name="relation_not_self"),
        ]
        indexes = [models.Index(fields=["target", "type"], name="relation_target")]

    def __str__(self) -> str:
        return f"{self.source_id} {self.type} {self.target_id}"


class Checkpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="checkpoints")
    note_enc = models.BinaryField()
    note = Sealed()
    author = models.ForeignKey(USER, null=True, on_delete=models.SET_NULL, related_name="+")
    key = models.ForeignKey("orgs.AgentKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    runtime = models.CharField(max_length=40)
    claim_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"checkpoint {self.pk} on {self.issue_id}"


class Comment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(USER, null=True, on_delete=models.SET_NULL, related_name="+")
    key = models.ForeignKey("orgs.AgentKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    runtime = models.CharField(max_length=40)
    body_enc = models.BinaryField()
    body = Sealed()
    created_at = models.DateTimeField(default=timezone.now)
    retracted_at = models.DateTimeField(null=True, blank=True)
    retracted_by = models.ForeignKey(USER, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    retract_note_enc = models.BinaryField(null=True)
    retract_note = Sealed()

    class Meta:
        indexes = [models.Index(fields=["issue", "created_at"], name="comment_issue")]

    def __str__(self) -> str:
        return f"comment {self.pk} on {self.issue_id}"


class Attachment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="attachments")
    url_enc = models.BinaryField()
    url = Sealed()
    title_enc = models.BinaryField(null=True)
    title = Sealed()
    created_by = models.ForeignKey(USER, null=True, on_delete=models.SET_NULL, related_name="+")
    key = models.ForeignKey("orgs.AgentKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    obsolete_at = models.DateTimeField(null=True, blank=True)
    obsolete_reason_enc = models.BinaryField(null=True)
    obsolete_reason = Sealed()
    # An uploaded file (PUT /api/v1/uploads/<token>), sealed like every other content.
    file_enc = models.BinaryField(null=True)
    file = Sealed(kind="bytes")
    file_size = models.PositiveIntegerField(null=True, blank=True)
    content_type = models.CharField(max_length=120, blank=True, default="")

    def __str__(self) -> str:
        return f"attachment {self.pk} on {self.issue_id}"


class ActivityQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("activity entries are append-only")

    def delete(self):
        raise PermissionError("activity entries are append-only")


class Activity(models.Model):
    """One receipt in the org's tamper-evident chain (see apps.issues.chain).

    Written only by the unit of work (``apps.work.writer``). The ORM refuses updates and deletes; on
    PostgreSQL a trigger refuses them too.
    """

    org = models.ForeignKey("orgs.Org", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    seq = models.BigIntegerField()
    issue = models.ForeignKey(Issue, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="activity")
    principal = models.ForeignKey(USER, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    key = models.ForeignKey("orgs.AgentKey", null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    runtime = models.CharField(max_length=40)
    verb = models.CharField(max_length=40)
    changes_enc = models.BinaryField()
    changes = Sealed(kind="json", row_attr="seq")
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = ActivityQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "seq"], name="activity_seq_unique")]
        indexes = [models.Index(fields=["issue", "seq"], name="activity_issue")]

    def __str__(self) -> str:
        return f"receipt {self.seq} ({self.verb})"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise PermissionError("activity entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("activity entries are append-only")


class Claim(models.Model):
    """One holding of one issue by one key. The token is stored only as its SHA-256.

    It lives with the issue it fences: every claim-bound write to an issue checks it
    (apps.issues.fencing); dispatch (apps.leases) creates and ends claims.

    A claim is live while ``ended_at`` is empty and ``expires_at`` is in the future. The
    issue row carries the live claim's id and expiry (``Issue.lease_*``); both change
    together under the project's claim lock.
    """

    class Kind(models.TextChoices):
        WORK = "work"
        REVIEW = "review"

    class End(models.TextChoices):
        RELEASED = "released"
        FINISHED = "finished"
        SUBMITTED = "submitted"  # handed to review: the author's lease frees
        EXPIRED = "expired"
        REVOKED = "revoked"  # the key or its person was retired

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    issue = models.ForeignKey("issues.Issue", on_delete=models.CASCADE, related_name="claims")
    key = models.ForeignKey("orgs.AgentKey", on_delete=models.CASCADE, related_name="claims")
    principal = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.WORK)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=10, choices=End.choices, blank=True)

    class Meta:
        # The table keeps the name it was created with in the leases app.
        db_table = "leases_claim"
        indexes = [
            models.Index(fields=["key"], condition=Q(ended_at__isnull=True), name="claim_open_by_key"),
        ]

    def __str__(self) -> str:
        return f"claim {self.pk} on {self.issue_id}"


class SearchTerm(models.Model):
    """One keyed term of an issue's title or body (apps.core.search): an HMAC under the
    org's search key, never the word. Rewritten with the content, in its transaction."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="search_terms")
    term = models.BinaryField(max_length=16)

    class Meta:
        indexes = [models.Index(fields=["org", "term"], name="search_org_term")]
        constraints = [models.UniqueConstraint(fields=["issue", "term"], name="search_issue_term_once")]

    def __str__(self) -> str:
        return f"search term of {self.issue_id}"
