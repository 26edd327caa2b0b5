"""Reads over the queue: what is ready, held, blocked, and by whom."""

from __future__ import annotations

from django.db.models import Count
from django.utils import timezone

from apps.core.formats import iso
from apps.issues.models import Claim, Issue
from apps.leases.services import queue_counts
from apps.orgs.actor import Actor


def queue_status(*, actor: Actor) -> dict:
    """Counts for the actor's project plus the live claims (holder, runtime, expiry)."""
    now = timezone.now()
    project = actor.project
    counts = queue_counts(actor=actor, project_id=project.pk, now=now)
    by_status = dict(
        Issue.objects.filter(project=project, work=True).values("status").annotate(n=Count("pk")).values_list("status", "n")
    )
    live = (
        Claim.objects.filter(org_id=actor.org.pk, ended_at__isnull=True, expires_at__gt=now, issue__project=project)
        .select_related("issue__project", "principal", "key")
        .order_by("expires_at")[:200]
    )
    return {
        "project": project.prefix,
        **counts,
        "byStatus": by_status,
        "leases": [
            {
                "identifier": c.issue.identifier,
                "heldBy": c.principal.email,
                "runtime": c.key.runtime,
                "kind": c.kind,
                "expiresAt": iso(c.expires_at),
                "lastHeartbeatAt": iso(c.last_heartbeat_at),
                "youHold": c.key_id == actor.key_id,
            }
            for c in live
        ],
    }
