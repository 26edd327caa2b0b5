from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Claim(models.Model):
    """One holding of one issue by one key. The token is stored only as its SHA-256.

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
        indexes = [
            models.Index(fields=["key"], condition=Q(ended_at__isnull=True), name="claim_open_by_key"),
        ]

    def __str__(self) -> str:
        return f"claim {self.pk} on {self.issue_id}"
