"""Inbound deliveries (SPEC §9): verify, deduplicate, log, and apply to the project.

``delivery_receive`` is the one entry point for both providers. Refusals are
``ServiceError``: NOT_FOUND (unknown connector, 404), GONE (revoked, 410), UNAUTHORIZED
(bad signature or token, 401). A delivery id already seen answers ``duplicate`` (200)
and writes nothing; an earlier attempt that ended in an error may be redelivered.

What a delivery does is written once, on the normalized ``Upstream`` event:
- a new upstream issue becomes a Retasc issue (label ``support``, milestone or due date
  as ``dueAt``, ``awaitingTriage``) authored by a placeholder for the upstream author;
- an upstream title or body edit updates it and re-quarantines it; labels and due date
  follow the source;
- closed upstream cancels it ("closed at source") unless it is done; reopened makes it
  todo and quarantined;
- a comment arrives from the placeholder named after its upstream author;
- with PR sync on, a merged PR/MR naming ``Fixes ACME-12`` (or on a branch
  ``acme-12/...``) marks that issue done; closed unmerged does nothing.
Everything acts only inside the connector's own org.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import uuid
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from apps.core.errors import ServiceError, invalid
from apps.intake import normalize
from apps.intake.models import Connector, Delivery, Provider, SourceIssue
from apps.intake.normalize import Upstream
from apps.issues import services as issue_services
from apps.issues.models import Status
from apps.issues.selectors import issue_resolve
from apps.orgs.actor import Actor
from apps.orgs.services import placeholder_get_or_create

log = logging.getLogger(__name__)

SUPPORT_LABEL = "support"
CLOSED_AT_SOURCE = "closed at source"
_NAMES = re.compile(r"\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?)\s*:?\s+([A-Za-z][A-Za-z0-9]{1,9}-\d+)\b", re.IGNORECASE)
_BRANCH = re.compile(r"^([A-Za-z][A-Za-z0-9]{1,9}-\d+)(?:/|$)")

# Per provider: the header carrying the delivery id, and the one naming the event.
HEADERS = {
    Provider.GITHUB: ("x-github-delivery", "x-github-event"),
    Provider.GITLAB: ("x-gitlab-event-uuid", "x-gitlab-event"),
}


@dataclass(frozen=True)
class Received:
    duplicate: bool
    outcome: str
    issue: str | None = None
    detail: str = ""

    def as_dict(self) -> dict:
        if self.duplicate:
            return {"code": "DUPLICATE", "message": "This delivery was already received; nothing was written."}
        return {"code": "ACCEPTED", "outcome": self.outcome, "issue": self.issue, "detail": self.detail or None}


# --- verification -----------------------------------------------------------------------


def connector_for_delivery(*, provider: str, connector_id: str) -> Connector:
    """The connector a delivery names: NOT_FOUND if unknown (or of the other provider),
    GONE if revoked."""
    try:
        pk = uuid.UUID(str(connector_id))
    except ValueError:
        raise ServiceError("NOT_FOUND", "No such connector.") from None
    connector = Connector.objects.select_related("org", "project").filter(pk=pk, provider=provider).first()
    if connector is None or connector.org.deleted_at is not None:
        raise ServiceError("NOT_FOUND", "No such connector.")
    if connector.revoked_at is not None:
        raise ServiceError("GONE", "This connector was revoked; remove the webhook.")
    return connector


def verify(connector: Connector, headers: dict, body: bytes) -> None:
    """GitHub: HMAC-SHA256 of the raw body; GitLab: the token header. Constant time."""
    secret = connector.secret.encode()
    if connector.provider == Provider.GITHUB:
        given = (headers.get("x-hub-signature-256") or "").encode()
        wanted = b"sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    else:
        given = (headers.get("x-gitlab-token") or "").encode()
        wanted = secret
    if not hmac.compare_digest(given, wanted):
        raise ServiceError("UNAUTHORIZED", "The delivery's signature does not match this connector's secret.")


# --- the entry point --------------------------------------------------------------------


def delivery_receive(*, provider: str, connector_id: str, headers: dict, body: bytes) -> Received:
    """Verify, deduplicate, log and apply one delivery. ``headers`` have lower-case names."""
    connector = connector_for_delivery(provider=provider, connector_id=connector_id)
    verify(connector, headers, body)
    id_header, event_header = HEADERS[provider]
    delivery_id = (headers.get(id_header) or "").strip()[:100]
    event = (headers.get(event_header) or "").strip()[:60]
    if not delivery_id or not event:
        raise invalid(id_header, f"A delivery needs the {id_header} and {event_header} headers.")
    try:
        payload = json.loads(body)
    except ValueError:
        raise invalid("body", "The delivery's body is not JSON.") from None
    now = timezone.now()
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                connector=connector, org_id=connector.org_id, delivery_id=delivery_id, event=event, received_at=now
            )
    except IntegrityError:
        # Seen before. Only an attempt that failed (and so wrote nothing) may run again.
        retried = Delivery.objects.filter(connector=connector, delivery_id=delivery_id, outcome=Delivery.Outcome.ERROR).update(
            outcome=Delivery.Outcome.RECEIVED, received_at=now, detail=""
        )
        if not retried:
            return Received(duplicate=True, outcome="duplicate")
        delivery = Delivery.objects.get(connector=connector, delivery_id=delivery_id)
    Connector.objects.filter(pk=connector.pk).update(deliveries_count=F("deliveries_count") + 1, last_delivery_at=now, live=True)
    outcome, identifier, detail, action = _apply_safely(connector, provider, event, payload)
    Delivery.objects.filter(pk=delivery.pk).update(outcome=outcome, issue=identifier or "", detail=detail[:500], action=action)
    return Received(duplicate=False, outcome=outcome, issue=identifier, detail=detail)


def _apply_safely(connector: Connector, provider: str, event: str, payload) -> tuple[str, str | None, str, str]:
    action = ""
    try:
        up = normalize.github(event, payload) if provider == Provider.GITHUB else normalize.gitlab(event, payload)
        if up is None:
            return Delivery.Outcome.IGNORED, None, f"{event} events are not synced.", _action_of(payload)
        action = up.action
        outcome, identifier, detail = apply(connector, up)
        return outcome, identifier, detail, action
    except ServiceError as exc:
        return Delivery.Outcome.ERROR, None, f"{exc.code}: {exc.message}", action
    except (KeyError, TypeError, ValueError) as exc:
        return (
            Delivery.Outcome.ERROR,
            None,
            f"INVALID_ARGUMENT: the payload is not shaped as expected ({type(exc).__name__}).",
            action,
        )
    except Exception:
        log.exception("applying a delivery failed (connector %s)", connector.pk)
        return Delivery.Outcome.ERROR, None, "INTERNAL: applying the delivery failed; redeliver it to retry.", action


def _action_of(payload) -> str:
    if isinstance(payload, dict):
        if isinstance(payload.get("action"), str):
            return payload["action"][:60]
        attrs = payload.get("object_attributes")
        if isinstance(attrs, dict) and isinstance(attrs.get("action"), str):
            return attrs["action"][:60]
    return ""


# --- applying ---------------------------------------------------------------------------


def _system(connector: Connector) -> Actor:
    """The connector acting: no principal, runtime ``github`` / ``gitlab``."""
    return Actor(org=connector.org, principal_id=None, key=None, runtime=connector.provider, project=connector.project)


def _placeholder(connector: Connector, login: str) -> Actor:
    membership = placeholder_get_or_create(org=connector.org, provider=connector.provider, login=login or "ghost")
    return Actor(
        org=connector.org,
        principal_id=membership.user_id,
        key=None,
        runtime=connector.provider,
        project=connector.project,
        membership=membership,
    )


def _labels(up: Upstream) -> list[str]:
    names = [SUPPORT_LABEL, *(name.strip()[:60] for name in up.labels if name and name.strip())]
    return list(dict.fromkeys(names))[:50]


def apply(connector: Connector, up: Upstream) -> tuple[str, str | None, str]:
    """Apply one normalized event. Returns (outcome, identifier, detail)."""
    if up.kind != normalize.PING and up.repo.lower() != connector.repo.lower():
        return Delivery.Outcome.IGNORED, None, f"The delivery is for {up.repo or 'another repository'}, not {connector.repo}."
    if up.kind == normalize.PING:
        return Delivery.Outcome.APPLIED, None, "ping: the connector is live."
    if up.kind == normalize.MERGE:
        return _merge(connector, up)
    link = SourceIssue.objects.select_related("issue__project").filter(connector=connector, upstream_id=up.upstream_id).first()
    if up.kind == normalize.COMMENT:
        if link is None:
            return Delivery.Outcome.IGNORED, None, f"#{up.number} is not synced."
        issue_services.comment_create(
            actor=_placeholder(connector, up.author), issue=link.issue.identifier, body=up.comment or "(empty comment)"
        )
        return Delivery.Outcome.APPLIED, link.issue.identifier, f"comment from {up.author}"
    if link is None:
        if not up.open or up.action == "closed":
            return Delivery.Outcome.IGNORED, None, f"#{up.number} is closed upstream and was never synced."
        try:
            return _create(connector, up)
        except IntegrityError:
            # A concurrent delivery synced the same upstream issue first: apply as an edit.
            link = SourceIssue.objects.select_related("issue__project").get(connector=connector, upstream_id=up.upstream_id)
            up.changed |= {"title", "body"}
    return _update(connector, link, up)


def _create(connector: Connector, up: Upstream) -> tuple[str, str, str]:
    def link(issue):
        SourceIssue.objects.create(
            connector=connector,
            org_id=connector.org_id,
            upstream_id=up.upstream_id,
            number=up.number,
            issue=issue,
            url=up.url[:500],
        )
        Connector.objects.filter(pk=connector.pk).update(issues_count=F("issues_count") + 1)

    kind = "GitHub" if connector.provider == Provider.GITHUB else "GitLab"
    issue = issue_services.issue_create(
        actor=_placeholder(connector, up.author),
        title=(up.title.strip() or f"{kind} issue #{up.number}")[:300],
        body=up.body or None,
        work=True,
        no_dependency=f"Synced from {kind} {connector.repo}#{up.number}",
        labels=_labels(up),
        due_at=up.due,
        project=connector.project.prefix,
        awaiting_triage=True,
        source=connector.provider,
        source_ref=f"{connector.repo}#{up.number}",
        on_created=link,
    )
    return Delivery.Outcome.APPLIED, issue.identifier, f"created from #{up.number}, awaiting triage"


def _update(connector: Connector, link: SourceIssue, up: Upstream) -> tuple[str, str, str]:
    issue = link.issue
    ident = issue.identifier
    system = _system(connector)
    if up.action == "closed":
        SourceIssue.objects.filter(pk=link.pk).update(upstream_open=False)  # before the cancel: no writeback
        if issue.status in (Status.DONE, Status.CANCELED):
            return Delivery.Outcome.IGNORED, ident, f"closed upstream; already {issue.status}"
        issue_services.issue_update(
            actor=system, identifier=ident, status=Status.CANCELED, cancel_reason=CLOSED_AT_SOURCE, unfenced=True
        )
        return Delivery.Outcome.APPLIED, ident, f"canceled: {CLOSED_AT_SOURCE}"
    if up.action == "reopened":
        SourceIssue.objects.filter(pk=link.pk).update(upstream_open=True)
        changes: dict = {"awaiting_triage": True}
        if issue.status in (Status.DONE, Status.CANCELED):
            changes["status"] = Status.TODO
        issue_services.issue_update(actor=system, identifier=ident, unfenced=True, **changes)
        return Delivery.Outcome.APPLIED, ident, "reopened: todo, awaiting triage"
    changes = {}
    if "title" in up.changed and up.title.strip():
        changes["title"] = up.title.strip()[:300]
    if "body" in up.changed:
        changes["body"] = up.body or None
    if changes:
        changes["awaiting_triage"] = True  # an upstream edit of the content is quarantined again
    if "labels" in up.changed:
        changes["labels"] = _labels(up)
    if "due" in up.changed:
        changes["due_at"] = up.due or ""
    if not changes:
        return Delivery.Outcome.IGNORED, ident, f"{up.action}: nothing to sync"
    issue_services.issue_update(actor=system, identifier=ident, unfenced=True, **changes)
    what = ", ".join(sorted(k.replace("_at", "").replace("awaiting_triage", "quarantined") for k in changes))
    return Delivery.Outcome.APPLIED, ident, f"{up.action}: {what}"


def named_issues(up: Upstream) -> list[str]:
    """Identifiers a PR/MR names: ``Fixes ACME-12`` in its title or body, or its branch."""
    found = [m.group(1).upper() for m in _NAMES.finditer(f"{up.title}\n{up.body}")]
    branch = _BRANCH.match(up.branch or "")
    if branch:
        found.append(branch.group(1).upper())
    return list(dict.fromkeys(found))


def _merge(connector: Connector, up: Upstream) -> tuple[str, str | None, str]:
    if not connector.pr_sync:
        return Delivery.Outcome.IGNORED, None, "PR sync is off for this connector."
    if not up.merged:
        return Delivery.Outcome.IGNORED, None, "closed without merging: nothing to do"
    system = _system(connector)
    done, notes = [], []
    for ident in named_issues(up):
        try:
            issue = issue_resolve(actor=system, identifier=ident)  # this org only
        except ServiceError:
            notes.append(f"{ident} not found")
            continue
        if issue.status == Status.DONE:
            notes.append(f"{issue.identifier} already done")
            continue
        issue_services.issue_update(actor=system, identifier=issue.identifier, status=Status.DONE, unfenced=True)
        done.append(issue.identifier)
    if not done:
        return Delivery.Outcome.IGNORED, None, "; ".join(notes) or "the merge names no issue"
    return Delivery.Outcome.APPLIED, done[0], "merged: done " + ", ".join(done) + (f" ({'; '.join(notes)})" if notes else "")
