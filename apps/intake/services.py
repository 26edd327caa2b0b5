"""Full org export (SPEC §9): owner-only, any time, decrypted. JSON (everything) or CSV (issues).

``org_export`` checks the caller up front and returns the body as an iterator of chunks,
so the HTTP view can stream an org of any size: issues and receipts are read in pages,
each page with a fixed number of queries. Only the caller's org is ever read (every query
filters on ``org_id``), and no secret leaves: agent keys, invites and tokens appear by their
visible prefix at most, never by hash or secret; connector secrets are not exported.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from django.utils import timezone

from apps.core.errors import ServiceError, invalid
from apps.core.formats import iso
from apps.issues.models import Activity, Attachment, Checkpoint, Comment, Issue, Label, Relation
from apps.issues.shapes import issue_shapes
from apps.orgs.actor import Actor
from apps.orgs.models import Membership, Project
from apps.orgs.services import owner_admin_only

FORMATS = ("json", "csv")
PAGE = 200
EXPORT_VERSION = 1

CSV_COLUMNS = (
    "identifier",
    "project",
    "title",
    "status",
    "priority",
    "work",
    "assignee",
    "author",
    "labels",
    "dueAt",
    "slaState",
    "parent",
    "blockedBy",
    "blocks",
    "awaitingTriage",
    "reclaimCount",
    "cancelReason",
    "source",
    "createdAt",
    "updatedAt",
    "closedAt",
    "acceptance",
    "checkpoint",
    "body",
)


@dataclass(frozen=True)
class Export:
    content_type: str
    filename: str
    chunks: Iterator[str]


def org_export(*, actor: Actor, format: str = "json") -> Export:
    """The org's export. Refused (FORBIDDEN) unless the caller is an active owner."""
    fmt = (format or "json").strip().lower()
    if fmt not in FORMATS:
        raise invalid("format", "format is json or csv.")
    if not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner can export the org.", tell_human="Ask an owner of the org.")
    owner_admin_only(actor)  # through an agent key, only an admin key exports
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    name = f"retasc-{actor.org.slug}-{stamp}.{fmt}"
    if fmt == "csv":
        return Export("text/csv; charset=utf-8", name, _csv(actor))
    return Export("application/json", name, _json(actor))


def _issue_pages(actor: Actor) -> Iterator[list[Issue]]:
    """Every issue of the org, oldest first, in pages (keyset pagination on (created_at, id))."""
    qs = Issue.objects.with_people().filter(org_id=actor.org.pk).select_related("project", "parent__project")
    last = None
    while True:
        page_qs = qs.order_by("created_at", "id")
        if last is not None:
            page_qs = page_qs.filter(created_at__gte=last.created_at).exclude(created_at=last.created_at, id__lte=last.id)
        page = list(page_qs[:PAGE])
        if not page:
            return
        yield page
        last = page[-1]


def _email(user) -> str | None:
    return user.email if user is not None else None


def _details(actor: Actor, issues: list[Issue]) -> dict:
    """Relations, comments, checkpoints and attachment metadata of one page of issues."""
    ids = [i.pk for i in issues]
    out: dict = defaultdict(lambda: {"relations": [], "comments": [], "checkpoints": [], "attachments": []})
    for rel in (
        Relation.objects.filter(org_id=actor.org.pk, source_id__in=ids)
        .select_related("target__project")
        .order_by("created_at", "pk")
    ):
        out[rel.source_id]["relations"].append(
            {"type": rel.type, "target": rel.target.identifier, "createdAt": iso(rel.created_at)}
        )
    for c in (
        Comment.objects.filter(org_id=actor.org.pk, issue_id__in=ids)
        .select_related("author", "retracted_by")
        .order_by("created_at", "pk")
    ):
        out[c.issue_id]["comments"].append(
            {
                "id": str(c.pk),
                "author": _email(c.author),
                "runtime": c.runtime,
                "body": c.body,
                "createdAt": iso(c.created_at),
                "retractedAt": iso(c.retracted_at),
                "retractedBy": _email(c.retracted_by),
                "retractNote": c.retract_note,
            }
        )
    for cp in (
        Checkpoint.objects.filter(org_id=actor.org.pk, issue_id__in=ids).select_related("author").order_by("created_at", "pk")
    ):
        out[cp.issue_id]["checkpoints"].append(
            {
                "id": str(cp.pk),
                "author": _email(cp.author),
                "runtime": cp.runtime,
                "note": cp.note,
                "createdAt": iso(cp.created_at),
            }
        )
    attachments = Attachment.objects.filter(org_id=actor.org.pk, issue_id__in=ids).defer("file_enc").select_related("created_by")
    for a in attachments.order_by("created_at", "pk"):
        out[a.issue_id]["attachments"].append(
            {
                "id": str(a.pk),
                "url": a.url,
                "title": a.title,
                "createdBy": _email(a.created_by),
                "createdAt": iso(a.created_at),
                "obsoleteAt": iso(a.obsolete_at),
                "obsoleteReason": a.obsolete_reason,
                "fileSize": a.file_size,
                "contentType": a.content_type or None,
            }
        )
    return out


def _issues(actor: Actor, now) -> Iterator[dict]:
    for page in _issue_pages(actor):
        details = _details(actor, page)
        for issue, shape in zip(page, issue_shapes(page, actor=None, now=now), strict=True):
            shape.pop("claim", None)  # a live lease is runtime state, not content
            shape.update(
                {
                    "project": issue.project.prefix,
                    "number": issue.number,
                    "noDependency": issue.no_dependency,
                    "sourceRef": issue.source_ref or None,
                    **details[issue.pk],
                }
            )
            yield shape


def _header(actor: Actor, now) -> dict:
    org = actor.org
    members = Membership.objects.filter(org_id=org.pk).select_related("user").order_by("created_at", "pk")
    return {
        "format": "retasc-export",
        "version": EXPORT_VERSION,
        "exportedAt": iso(now),
        "org": {"slug": org.slug, "name": org.name, "timezone": org.timezone, "createdAt": iso(org.created_at)},
        "projects": [
            {"prefix": p.prefix, "name": p.name, "issues": p.issue_seq, "createdAt": iso(p.created_at)}
            for p in Project.objects.filter(org_id=org.pk).order_by("prefix")
        ],
        "members": [
            {
                "email": m.user.email,
                "name": m.user.get_full_name() or m.user.email,
                "role": m.role,
                "status": m.status,
                "joinedAt": iso(m.created_at),
            }
            for m in members
        ],
        "labels": [
            {"name": label.name, "color": label.color, "createdAt": iso(label.created_at)}
            for label in Label.objects.filter(org_id=org.pk).order_by("name")
        ],
    }


def _activity(actor: Actor) -> Iterator[dict]:
    qs = Activity.objects.filter(org_id=actor.org.pk).select_related("principal", "key", "issue__project").order_by("seq")
    for entry in qs.iterator(chunk_size=500):
        yield {
            "seq": entry.seq,
            "verb": entry.verb,
            "at": iso(entry.created_at),
            "issue": entry.issue.identifier if entry.issue_id else None,
            "principal": _email(entry.principal),
            "runtime": entry.runtime,
            "key": entry.key.prefix if entry.key_id else None,
            "changes": entry.changes,
            "prevHash": entry.prev_hash,
            "hash": entry.hash,
        }


def _json(actor: Actor) -> Iterator[str]:
    now = timezone.now()
    head = json.dumps(_header(actor, now), ensure_ascii=False)
    yield head[:-1] + ', "issues": ['
    for n, shape in enumerate(_issues(actor, now)):
        yield ("," if n else "") + "\n" + json.dumps(shape, ensure_ascii=False)
    yield '\n], "activity": ['
    for n, entry in enumerate(_activity(actor)):
        yield ("," if n else "") + "\n" + json.dumps(entry, ensure_ascii=False)
    yield "\n]}\n"


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    """One CSV cell. Text that a spreadsheet would run as a formula gets a leading
    apostrophe (OWASP "CSV injection"); lists join with "; "."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        value = "; ".join(str(v) for v in value)
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _csv(actor: Actor) -> Iterator[str]:
    now = timezone.now()
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    for page in _issue_pages(actor):
        for issue, shape in zip(page, issue_shapes(page, actor=None, now=now), strict=True):
            shape["project"] = issue.project.prefix
            writer.writerow([_cell(shape.get(col)) for col in CSV_COLUMNS])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    if buf.tell():
        yield buf.getvalue()
