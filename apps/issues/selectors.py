"""Reads over issues. Every lookup is scoped to the actor's org: others read as NOT_FOUND."""

from __future__ import annotations

import base64
import re
import uuid

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core import search, sql
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.unit import metered_read
from apps.issues import inputs
from apps.issues.models import (
    CLOSED,
    Activity,
    Attachment,
    Checkpoint,
    Claim,
    Comment,
    Issue,
    Label,
    Relation,
    SearchTerm,
    Status,
)
from apps.issues.shapes import shape_columns, shape_columns_attach
from apps.issues.sla import sla
from apps.orgs.actor import Actor
from apps.orgs.models import Membership, Project, ProjectAlias
from apps.orgs.selectors import human_resolve, project_shape

User = get_user_model()
IDENT_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]{1,9})-(\d{1,9})\s*$")


def issue_resolve(*, actor: Actor, identifier: str, lock: bool = False) -> Issue:
    match = IDENT_RE.match(str(identifier or ""))
    if not match:
        raise ServiceError("NOT_FOUND", f"{inputs.brief(identifier)!r} is not an issue identifier (like ABC-12).")
    issue = _issue_by_prefix(actor=actor, prefix=match.group(1).upper(), number=int(match.group(2)), lock=lock)
    if issue is None:
        # A renamed project's old prefix still resolves (OLD-12 -> NEW-12).
        alias = (
            ProjectAlias.objects.filter(org_id=actor.org.pk, prefix=match.group(1).upper())
            .values_list("project_id", flat=True)
            .first()
        )
        if alias is not None:
            qs = Issue.objects.select_related("project").filter(org_id=actor.org.pk, project_id=alias, number=int(match.group(2)))
            if lock:
                qs = qs.select_for_update(no_key=True, of=("self",))
            issue = qs.first()
    if issue is None:
        raise not_found(f"Issue {inputs.brief(identifier)}")
    return issue


def _issue_by_prefix(*, actor: Actor, prefix: str, number: int, lock: bool) -> Issue | None:
    """The issue ``prefix-number`` of the actor's org (row-locked with ``lock``).

    ``Issue.objects.select_related("project").filter(org=..., project__prefix=...,
    number=...)``, written out once: every write to an issue (heartbeat, checkpoint,
    finish) starts here, and compiling the ORM version was a large share of their CPU.
    """
    issue_t, project_t = Issue._meta.db_table, Project._meta.db_table
    extra, joins = "", ""
    if lock:
        # A write also learns whether the issue is in any ``blocks`` edge (two index
        # probes): closing one that is not needs no rank refresh (apps.issues.ranking
        # own_ranks); and reads its live claim's row, which the claim fence checks
        # (apps.issues.fencing.claim_fence), in the same statement.
        rel = Relation._meta.db_table
        extra = (
            f", (EXISTS (SELECT 1 FROM {rel} r WHERE r.source_id = i.id AND r.type = 'blocks')"
            f" OR EXISTS (SELECT 1 FROM {rel} r WHERE r.target_id = i.id AND r.type = 'blocks')) AS has_blocks_edges, "
            + ", ".join(f'lc.{connection.ops.quote_name(f.column)} AS "lease_claim_{n}"' for n, f in enumerate(_CLAIM_FIELDS))
        )
        joins = f" LEFT JOIN {Claim._meta.db_table} lc ON lc.id = i.lease_claim_id AND lc.issue_id = i.id"
    query = (
        f"SELECT {sql.columns(Issue, 'i')}{extra} FROM {issue_t} i JOIN {project_t} p ON p.id = i.project_id{joins}"
        " WHERE i.org_id = %s AND p.prefix = %s AND i.number = %s"
    )
    if lock and connection.vendor == "postgresql":
        query += " FOR NO KEY UPDATE OF i"  # SQLite: the write transaction already excludes writers
    org_id = Issue._meta.get_field("org").target_field.get_db_prep_value(actor.org.pk, connection)
    for issue in Issue.objects.raw(query, [org_id, prefix, number]):
        if actor.project is not None and actor.project.pk == issue.project_id:
            issue.project = actor.project
        if lock:
            values = [issue.__dict__.pop(f"lease_claim_{n}") for n in range(len(_CLAIM_FIELDS))]
            issue.__dict__["_lease_claim"] = sql.load(Claim, values) if values[0] is not None else None
        return issue
    return None


_CLAIM_FIELDS = Claim._meta.concrete_fields


def issue_with_people(pk, *, row: tuple | None = None) -> Issue:
    """``Issue.objects.with_people().get(pk=pk)``, written out (apps.core.sql): every
    claim and every write answers with the issue shaped from this read. With ``row``,
    what ``issue_with_people_query(pk)`` already read (no statement)."""
    if row is None:
        with connection.cursor() as cur:
            cur.execute(*issue_with_people_query(pk))
            row = cur.fetchone()
    if row is None:
        raise Issue.DoesNotExist(f"issue {pk} is gone")
    issue, at = _load_with_people(row, _PEOPLE_PARTS)
    if len(row) > at:
        shape_columns_attach(issue, *row[at:])
    return issue


_PEOPLE_PARTS = ((Issue, "i"), (Project, "p"), (User, "ua"), (User, "uu"), (Checkpoint, "c"), (User, "cu"))


def issue_with_people_query(pk) -> tuple[str, list]:
    """The statement ``issue_with_people`` runs (to send it with another one)."""
    q = connection.ops.quote_name
    # On PostgreSQL the issue's edges and labels come in the same statement.
    along = shape_columns("i")
    query = (
        f"SELECT {', '.join(sql.columns(model, alias) for model, alias in _PEOPLE_PARTS)}{', ' + along if along else ''}"
        f" FROM {q(Issue._meta.db_table)} i JOIN {q(Project._meta.db_table)} p ON p.id = i.project_id"
        f" LEFT JOIN {q(User._meta.db_table)} ua ON ua.id = i.assignee_id"
        f" LEFT JOIN {q(User._meta.db_table)} uu ON uu.id = i.author_id"
        f" LEFT JOIN {q(Checkpoint._meta.db_table)} c ON c.id = i.checkpoint_id"
        f" LEFT JOIN {q(User._meta.db_table)} cu ON cu.id = c.author_id"
        " WHERE i.id = %s"
    )
    return query, [Issue._meta.pk.get_db_prep_value(pk, connection)]


def project_resolve(*, actor: Actor, prefix: str | None) -> Project:
    if not prefix:
        if actor.project is None:
            raise invalid("prefix", "Name a project prefix.")
        return actor.project
    prefix = inputs.ref(prefix, "prefix", limit=40)
    project = Project.objects.filter(org_id=actor.org.pk, prefix=prefix.upper()).first()
    if project is None:
        raise not_found(f"Project {inputs.brief(prefix)}")
    return project


def active_member(*, org_id, user_id) -> bool:
    return Membership.objects.filter(org_id=org_id, user_id=user_id, status=Membership.Status.ACTIVE).exists()


def sla_of(issue: Issue, now=None):
    state, remaining, _ = sla(issue.created_at, issue.due_at, now or timezone.now())
    return state, remaining


# --- listing -------------------------------------------------------------------------


def _cursor_decode(cursor: str | None):
    """(created_at, number, pk) from a cursor ``_cursor_encode`` gave out. Each part is
    parsed here: a forged cursor whose parts decode but are not a datetime, a number and
    an issue id is the same refusal as one that does not decode at all."""
    if not cursor:
        return None
    refused = invalid("cursor", "That cursor is not one this server gave out.")
    if not isinstance(cursor, str) or len(cursor) > 200:
        raise refused
    try:
        created, number, pk = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("utf-8").split("|")
        moment = parse_datetime(created)
        number = int(number) if number.isascii() and number.isdigit() and len(number) < 12 else None
        pk = uuid.UUID(pk)
    except (ValueError, UnicodeError, TypeError):
        raise refused from None
    if moment is None or timezone.is_naive(moment) or number is None:
        raise refused
    return moment, number, pk


def _query_hashes(actor: Actor, query) -> list[bytes]:
    return search.query_terms(str(actor.org.pk), inputs.text(query, "query", limit=200, one_line=True) or "")


def search_ranked(qs, *, actor: Actor, query):
    """``qs`` narrowed to the issues sharing a term with ``query``, each annotated with
    ``hits``: how many of the query's terms it matches (apps.core.search). Order it by
    ``-hits`` first. A query with no searchable term (punctuation only) matches nothing."""
    hashes = _query_hashes(actor, query)
    if not hashes:
        return qs.none().annotate(hits=Count("search_terms"))
    # One join, filtered before the count: only matching terms are counted (one row per
    # distinct term and issue), and the (org, term) index finds them.
    qs = qs.filter(search_terms__org_id=actor.org.pk, search_terms__term__in=hashes)
    return qs.annotate(hits=Count("search_terms"))


def search_page(*, actor: Actor, query, where=(), label: str | None = None, offset: int = 0, size: int = 51) -> list[Issue]:
    """One page of ``list_issues(query=...)``: the issues sharing a term with ``query``,
    ranked by how many of its terms they match, then in dispatch order, each with its
    ``hits``; ``where`` holds ``(column, values)`` filters (``None``: the column is empty)
    and ``label`` a label name. Issue rows come with their project and people, as
    ``Issue.objects.with_people()`` loads them.

    One statement, written out (apps.core.sql explains why): the ranking (count the
    matching terms per issue, sort every match) runs on the index entries and the issue's
    order columns only, and the wide row (six tables) is joined for the page alone. The
    ORM version grouped and sorted every match with all six tables' columns and spent
    most of a search compiling itself (measured in docs/benchmarks.md)."""
    hashes = _query_hashes(actor, query)
    if not hashes:
        return []
    q = connection.ops.quote_name
    org = Issue._meta.get_field("org").target_field.get_db_prep_value(actor.org.pk, connection)
    term_field = SearchTerm._meta.get_field("term")
    terms = [term_field.get_db_prep_value(t, connection) for t in hashes]
    conditions, params = [], [org, *terms, org]
    for name, values in where:
        field = Issue._meta.get_field(name[:-3] if name.endswith("_id") else name)
        column = f"i.{q(field.column)}"
        if values is None:
            conditions.append(f"{column} IS NULL")
            continue
        target = field.target_field if field.is_relation else field
        conditions.append(f"{column} IN ({', '.join(['%s'] * len(values))})")
        params += [target.get_db_prep_value(v, connection) for v in values]
    if label:
        through = Issue.labels.through._meta
        conditions.append(
            f"EXISTS (SELECT 1 FROM {q(through.db_table)} il JOIN {q(Label._meta.db_table)} l ON l.id = il.label_id"
            " WHERE il.issue_id = i.id AND l.name = %s)"
        )
        params.append(label)
    params += [size, offset]
    parts = ((Issue, "i"), (Project, "p"), (User, "ua"), (User, "uu"), (Checkpoint, "c"), (User, "cu"))
    issue_t, term_t = q(Issue._meta.db_table), q(SearchTerm._meta.db_table)
    ranked = (
        f"SELECT t.issue_id AS id, COUNT(*) AS hits, i.dispatch_rank AS dr, i.created_at AS ca, i.number AS nb"
        f" FROM {term_t} t JOIN {issue_t} i ON i.id = t.issue_id"
        f" WHERE t.org_id = %s AND t.term IN ({', '.join(['%s'] * len(terms))}) AND i.org_id = %s"
        + "".join(f" AND {c}" for c in conditions)
        + " GROUP BY t.issue_id, i.dispatch_rank, i.created_at, i.number"
        " ORDER BY COUNT(*) DESC, i.dispatch_rank, i.created_at, i.number, t.issue_id LIMIT %s OFFSET %s"
    )
    statement = (
        f"SELECT {', '.join(sql.columns(model, alias) for model, alias in parts)}, r.hits"
        f" FROM ({ranked}) r JOIN {issue_t} i ON i.id = r.id JOIN {q(Project._meta.db_table)} p ON p.id = i.project_id"
        f" LEFT JOIN {q(User._meta.db_table)} ua ON ua.id = i.assignee_id"
        f" LEFT JOIN {q(User._meta.db_table)} uu ON uu.id = i.author_id"
        f" LEFT JOIN {q(Checkpoint._meta.db_table)} c ON c.id = i.checkpoint_id"
        f" LEFT JOIN {q(User._meta.db_table)} cu ON cu.id = c.author_id"
        " ORDER BY r.hits DESC, r.dr, r.ca, r.nb, r.id"
    )
    with connection.cursor() as cur:
        cur.execute(statement, params)
        rows = cur.fetchall()
    return [_issue_from_row(row, parts) for row in rows]


def _issue_from_row(row, parts) -> Issue:
    """An issue with its project and people from one row of ``parts``' columns (the
    layout of ``issue_with_people``), plus a trailing ``hits`` when the row has one."""
    issue, at = _load_with_people(row, parts)
    if at < len(row):
        issue.hits = row[at]
    return issue


def _load_with_people(row, parts) -> tuple[Issue, int]:
    """The issue of one row of ``parts``' columns with its project and people attached,
    and where in the row its columns end."""
    loaded, at = [], 0
    for model, _ in parts:
        values = row[at : at + sql.width(model)]
        at += sql.width(model)
        loaded.append(sql.load(model, values) if values[0] is not None else None)
    issue, project, assignee, author, checkpoint, checkpoint_author = loaded
    issue.project, issue.assignee, issue.author, issue.checkpoint = project, assignee, author, checkpoint
    if checkpoint is not None:
        checkpoint.author = checkpoint_author
    return issue, at


def _search_cursor_decode(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        kind, offset = base64.urlsafe_b64decode(cursor.encode()).decode().split(":")
        if kind != "search" or not offset.isdigit() or len(offset) > 7:
            raise ValueError
        return int(offset)
    except Exception:
        raise invalid("cursor", "That cursor is not one this server gave out.") from None


def _search_cursor_encode(offset: int) -> str:
    return base64.urlsafe_b64encode(f"search:{offset}".encode()).decode()


def _cursor_encode(issue: Issue) -> str:
    return base64.urlsafe_b64encode(f"{issue.created_at.isoformat()}|{issue.number}|{issue.pk}".encode()).decode()


def issue_list(
    *,
    actor: Actor,
    status=None,
    priority=None,
    label=None,
    author=None,
    assignee=None,
    sla_state=None,
    project=None,
    limit=50,
    cursor=None,
    query=None,
) -> tuple[list[Issue], str | None]:
    """Newest first, cursor-paginated. Filters take one value or a list.

    With ``query``: the issues whose title or body share a term with it (apps.core.search),
    ranked by how many of its terms they match, then in dispatch order; filters combine.
    """
    try:
        limit = int(limit)
    except (TypeError, ValueError, OverflowError):
        raise invalid("limit", "limit must be a number from 1 to 200.") from None
    if not 1 <= limit <= 200:
        raise invalid("limit", "limit must be a number from 1 to 200.")
    # Each filter once, as (field, values) pairs; ``values`` None means "is empty".
    where: list[tuple[str, list | None]] = []
    if project:
        where.append(("project_id", [project_resolve(actor=actor, prefix=project).pk]))
    if status:
        values = [status] if isinstance(status, str) else list(status)
        bad = [v for v in values if v not in Status.values]
        if bad:
            raise invalid("status", f"Unknown status {inputs.brief(bad[0])!r}; use one of {', '.join(Status.values)}.")
        where.append(("status", values))
    if priority is not None and priority != "":
        values = [priority] if not isinstance(priority, list) else priority
        where.append(("priority", [inputs.priority(v) for v in values]))
    label_name = inputs.ref(label, "label", limit=60) if label else None
    if author:
        where.append(("author_id", [human_resolve(actor=actor, ref=author, field="author")]))
    if assignee:
        person = human_resolve(actor=actor, ref=assignee, field="assignee", allow_none=True)
        where.append(("assignee_id", None if person is None else [person]))
    if query is not None and query != "":
        offset = _search_cursor_decode(cursor)
        rows = search_page(actor=actor, query=query, where=where, label=label_name, offset=offset, size=limit + 1)
        more = len(rows) > limit
        return rows[:limit], (_search_cursor_encode(offset + limit) if more else None)
    qs = Issue.objects.filter(org_id=actor.org.pk).with_people()
    for name, values in where:
        qs = qs.filter(**({f"{name}__in": values} if values is not None else {name: None}))
    if label_name:
        qs = qs.filter(labels__name=label_name)
    decoded = _cursor_decode(cursor)
    if decoded:
        created, number, pk = decoded
        qs = qs.filter(Q(created_at__lt=created) | Q(created_at=created, pk__lt=pk))
    qs = qs.order_by("-created_at", "-pk")
    if sla_state:
        if sla_state not in ("ok", "warning", "breaching", "breached"):
            raise invalid("slaState", "slaState is ok, warning, breaching or breached.")
        now = timezone.now()
        qs = qs.filter(due_at__isnull=False)
        rows, page = [], qs.iterator(chunk_size=200)
        for issue in page:
            if sla_of(issue, now)[0] == sla_state:
                rows.append(issue)
                if len(rows) > limit:
                    break
    else:
        rows = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (_cursor_encode(rows[-1]) if more and rows else None)


def activity_for_issue(*, issue: Issue) -> list[Activity]:
    return list(Activity.objects.filter(issue_id=issue.pk).select_related("principal", "key").order_by("seq"))


def labels_list(*, actor: Actor) -> list[Label]:
    return list(Label.objects.filter(org_id=actor.org.pk).order_by("name"))


def attachment_file(*, actor: Actor, attachment: str):
    """An uploaded attachment with its (sealed) file, for members of its org only."""
    try:
        pk = uuid.UUID(str(attachment))
    except ValueError:
        raise not_found("Attachment") from None
    att = Attachment.objects.filter(pk=pk, org_id=actor.org.pk, file_enc__isnull=False).first()
    if att is None:
        raise not_found("Attachment file")
    metered_read(actor, "get_attachment")
    return att


def comments_list(*, actor: Actor, issue: str) -> list:
    """An issue's comments, oldest first, retracted ones included (struck through)."""
    target = issue_resolve(actor=actor, identifier=issue)
    return list(Comment.objects.filter(issue=target).select_related("issue__project", "author").order_by("created_at", "pk"))


def attachments_list(*, actor: Actor, issue: str) -> list:
    """An issue's attachments, oldest first, obsolete ones included (marked)."""
    target = issue_resolve(actor=actor, identifier=issue)
    rows = Attachment.objects.filter(issue=target).select_related("issue__project").defer("file_enc")
    return list(rows.order_by("created_at", "pk"))


def attachment_get(*, actor: Actor, attachment: str):
    """One attachment of the actor's org; any other id reads as NOT_FOUND."""

    try:
        pk = uuid.UUID(str(attachment))
    except ValueError:
        raise not_found("Attachment") from None
    att = Attachment.objects.select_related("issue__project").defer("file_enc").filter(pk=pk, org_id=actor.org.pk).first()
    if att is None:
        raise not_found("Attachment")
    return att


def project_get(*, actor: Actor, prefix: str | None = None) -> dict:
    if prefix:
        prefix = inputs.ref(prefix, "prefix", limit=40)
        project = Project.objects.filter(org_id=actor.org.pk, prefix=prefix.upper()).first()
    else:
        project = actor.project
    if project is None:
        raise not_found(f"Project {inputs.brief(prefix)}")
    by_status = dict(Issue.objects.filter(project=project).values("status").annotate(n=Count("pk")).values_list("status", "n"))
    open_count = sum(n for s, n in by_status.items() if s not in CLOSED)
    return project_shape(project, {"byStatus": by_status, "open": open_count})
