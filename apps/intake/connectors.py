"""Connectors: create (owner), list, revoke (owner), and read the delivery log.

Every way to create one (the Dash, ``POST /api/v1/connectors``, ``retasc connector
add``, ``manage.py add_connector``) calls ``connector_create`` and answers the same
``{connectorId, webhookUrl, secret}``; the secret is shown once and stored sealed.
"""

from __future__ import annotations

import re
import secrets
import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from apps.core.errors import invalid, not_found
from apps.core.formats import iso
from apps.core.unit import mutation
from apps.intake import github, gitlab
from apps.intake.models import Connector, Delivery, Provider, WritebackJob
from apps.issues import inputs
from apps.issues.selectors import project_resolve
from apps.orgs.actor import Actor
from apps.orgs.services import owner_only

DEFAULT_API_URLS = {Provider.GITHUB: github.DEFAULT_API_URL, Provider.GITLAB: gitlab.DEFAULT_API_URL}
_REPO = {
    Provider.GITHUB: re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$"),
    Provider.GITLAB: re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+$"),
}
LOG_SIZE = 50


def webhook_url(connector: Connector) -> str:
    return f"{settings.PUBLIC_URL}/hooks/{connector.provider}/{connector.pk}"


def _api_url(value, provider: str) -> str:
    if value is None or str(value).strip() == "":
        return DEFAULT_API_URLS[provider]
    url = str(value).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > 500 or parts.username or parts.password:
        raise invalid("apiUrl", "apiUrl is the provider's API base URL, http:// or https://, without credentials.")
    return url


def connector_create(*, actor: Actor, provider, project, repo, token=None, api_url=None, pr_sync=False) -> dict:
    """Owner only. Answers ``{connectorId, webhookUrl, secret}``; the secret is shown once."""
    owner_only(actor)
    provider = str(provider or "").strip().lower()
    if provider not in Provider.values:
        raise invalid("provider", "provider is github or gitlab.")
    repo = str(repo or "").strip().strip("/")
    if not _REPO[provider].fullmatch(repo) or len(repo) > 255:
        raise invalid("repo", "repo is OWNER/NAME (GitLab: the project's full path, group/subgroup/name).")
    token = inputs.text(token, "token", limit=500, one_line=True)
    url = _api_url(api_url, provider)
    pr_sync = inputs.boolean(pr_sync, "prSync") if pr_sync is not None else False
    target = project_resolve(actor=actor, prefix=project)
    secret = secrets.token_urlsafe(32)
    with mutation(actor, "add_connector", charge=False) as unit:
        connector = Connector(
            org_id=actor.org.pk,
            project=target,
            provider=provider,
            repo=repo,
            api_url=url,
            pr_sync=pr_sync,
            created_by_id=actor.principal_id,
        )
        connector.secret = secret
        connector.token = token or None
        connector.save(force_insert=True)
        unit.record(
            "connector_added",
            changes={
                "connector": [None, {"id": str(connector.pk), "provider": provider, "repo": repo, "project": target.prefix}]
            },
        )
    return {"connectorId": str(connector.pk), "webhookUrl": webhook_url(connector), "secret": secret}


def _connector(actor: Actor, connector_id) -> Connector:
    try:
        pk = uuid.UUID(str(connector_id))
    except ValueError:
        raise not_found(f"Connector {connector_id}") from None
    row = Connector.objects.select_related("project").filter(pk=pk, org_id=actor.org.pk).first()
    if row is None:
        raise not_found(f"Connector {connector_id}")
    return row


def connector_revoke(*, actor: Actor, connector_id) -> dict:
    """Owner only. A revoked connector's deliveries get 410; pending writebacks stop."""
    owner_only(actor)
    connector = _connector(actor, connector_id)
    with mutation(actor, "revoke_connector", charge=False) as unit:
        now = timezone.now()
        changed = Connector.objects.filter(pk=connector.pk, revoked_at__isnull=True).update(revoked_at=now, live=False)
        if changed:
            WritebackJob.objects.filter(connector=connector, state=WritebackJob.State.PENDING).update(
                state=WritebackJob.State.FAILED, last_error="The connector was revoked.", finished_at=now
            )
            unit.record("connector_revoked", changes={"connector": [{"id": str(connector.pk), "repo": connector.repo}, None]})
    connector.refresh_from_db()
    return connector_shape(connector)


def connector_shape(c: Connector) -> dict:
    return {
        "connectorId": str(c.pk),
        "provider": c.provider,
        "repo": c.repo,
        "project": c.project.prefix,
        "apiUrl": c.api_url,
        "webhookUrl": webhook_url(c),
        "prSync": c.pr_sync,
        "live": c.live,
        "lastDeliveryAt": iso(c.last_delivery_at),
        "counts": {"deliveries": c.deliveries_count, "issues": c.issues_count, "writebacks": c.writebacks_count},
        "lastError": c.last_error or None,
        "lastErrorAt": iso(c.last_error_at),
        "createdAt": iso(c.created_at),
        "revokedAt": iso(c.revoked_at),
    }


def connectors_list(*, actor: Actor) -> list[dict]:
    qs = Connector.objects.filter(org_id=actor.org.pk).select_related("project").order_by("-created_at")
    return [connector_shape(c) for c in qs]


def delivery_shape(d: Delivery) -> dict:
    return {
        "deliveryId": d.delivery_id,
        "event": d.event,
        "action": d.action or None,
        "receivedAt": iso(d.received_at),
        "outcome": d.outcome,
        "issue": d.issue or None,
        "detail": d.detail or None,
    }


def writeback_shape(j: WritebackJob) -> dict:
    return {
        "issue": j.identifier,
        "reason": j.reason,
        "state": j.state,
        "attempts": j.attempts,
        "nextAttemptAt": iso(j.next_attempt_at) if j.state == WritebackJob.State.PENDING else None,
        "lastError": j.last_error or None,
        "createdAt": iso(j.created_at),
        "finishedAt": iso(j.finished_at),
    }


def connector_log(*, actor: Actor, connector_id, limit: int = LOG_SIZE) -> dict:
    """The connector with its latest deliveries and writebacks (newest first)."""
    connector = _connector(actor, connector_id)
    deliveries = Delivery.objects.filter(connector=connector).order_by("-received_at", "-pk")[:limit]
    writebacks = WritebackJob.objects.filter(connector=connector).order_by("-created_at", "-pk")[:limit]
    return {
        **connector_shape(connector),
        "deliveries": [delivery_shape(d) for d in deliveries],
        "writebacks": [writeback_shape(j) for j in writebacks],
    }
