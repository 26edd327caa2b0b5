"""Reads shaped for the Dash pages. Every query is scoped to the actor's org.

Domain rules (dispatch eligibility, SLA, shapes) come from the domain selectors and
services; this module only combines them into what a page shows.
"""

from __future__ import annotations

import zoneinfo
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from urllib.parse import urlencode

from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_date

from apps.billing.usage import usage_totals
from apps.core import inputs
from apps.core.errors import ServiceError, invalid
from apps.issues import acceptance as acceptance_rules
from apps.issues.chain import check_org_cached
from apps.issues.models import CLOSED, DISPATCHABLE, Attachment, Checkpoint, Claim, Comment, Issue, Relation, Status
from apps.issues.selectors import activity_for_issue, issue_resolve, search_ranked
from apps.issues.shapes import activity_shape, issue_shapes
from apps.leases.services import _open_blocker_exists, queue_counts
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Membership, Project
from apps.orgs.selectors import human_resolve

PAGE = 100
ORDERS = {
    "dispatch": ("dispatch_rank", "created_at", "number"),
    "newest": ("-created_at", "-number"),
    "updated": ("-updated_at",),
    "due": ("due_at", "dispatch_rank"),
}


@dataclass
class QueueFilters:
    project: str = ""
    status: str = "open"  # open | all | one status
    runtime: str = ""
    priority: str = ""
    lane: str = ""  # "" anyone | me | none | member e-mail
    state: str = ""  # ready | blocked | held | triage
    created_from: str = ""
    created_to: str = ""
    order: str = "dispatch"
    search: str = ""  # words of titles and bodies: best matches first
    offset: int = 0
    errors: list = field(default_factory=list)

    @classmethod
    def from_query(cls, q) -> QueueFilters:
        f = cls(
            project=q.get("project", "").strip().upper(),
            status=q.get("status", "open") or "open",
            runtime=q.get("runtime", "").strip(),
            priority=q.get("priority", "").strip(),
            lane=q.get("lane", "").strip(),
            state=q.get("state", "").strip(),
            created_from=q.get("from", "").strip(),
            created_to=q.get("to", "").strip(),
            order=q.get("order", "dispatch") if q.get("order") in ORDERS else "dispatch",
            search=q.get("q", "").strip()[:200],
        )
        f.offset = inputs.offset(q.get("offset"))
        for name in ("q", "project", "status", "runtime", "priority", "lane", "state", "created_from", "created_to"):
            value = getattr(f, name, None)
            if isinstance(value, str):
                inputs.clean(value, name)  # NUL or a lone surrogate: INVALID_ARGUMENT (400)
        return f

    def query(self, **override) -> str:
        values = {
            "project": self.project,
            "status": self.status,
            "runtime": self.runtime,
            "priority": self.priority,
            "lane": self.lane,
            "state": self.state,
            "from": self.created_from,
            "to": self.created_to,
            "order": self.order,
            "q": self.search,
            "offset": self.offset or "",
        }
        values.update(override)
        return urlencode({k: v for k, v in values.items() if v not in ("", None, 0)})


def _day(value: str, tz, *, end: bool) -> datetime | None:
    if not value:
        return None
    day = parse_date(value)
    if day is None:
        raise invalid("date", f"{value!r} is not a date (YYYY-MM-DD).")
    return datetime.combine(day, time.max if end else time.min, tzinfo=tz)


def _live_claims_by_issue(issue_ids, now) -> dict:
    rows = (
        Claim.objects.filter(issue_id__in=issue_ids, ended_at__isnull=True, expires_at__gt=now)
        .select_related("key", "principal")
        .only(
            "issue_id",
            "kind",
            "expires_at",
            "last_heartbeat_at",
            "created_at",
            "key__runtime",
            "key__label",
            "key__prefix",
            "principal__email",
        )
    )
    return {c.issue_id: c for c in rows}


def row_state(issue: Issue, shape: dict, live) -> str:
    if issue.status in CLOSED:
        return "closed"
    if issue.awaiting_triage:
        return "triage"
    if live is not None:
        return "held"
    if issue.status == Status.BLOCKED or shape["blockedByOpen"]:
        return "blocked"
    if not issue.work:
        return "container"
    if issue.status in DISPATCHABLE:
        return "ready"
    return "waiting"


def _filtered(*, actor: Actor, filters: QueueFilters, now, projects: list) -> tuple:
    """The org's issues narrowed by every filter except status and search.

    Returns ``(queryset, project or None)``. A bad filter value is reported in
    ``filters.errors`` and narrows nothing. The queue and the board both read through here.
    """
    tz = zoneinfo.ZoneInfo(actor.org.timezone)
    qs = Issue.objects.filter(org_id=actor.org.pk)
    project = None
    if filters.project:
        project = next((p for p in projects if p.prefix == filters.project), None)
        if project is None:
            filters.errors.append(f"No project {filters.project}.")
        else:
            qs = qs.filter(project=project)
    if filters.priority.isdigit():
        qs = qs.filter(priority=int(filters.priority))
    if filters.lane:
        try:
            lane = human_resolve(actor=actor, ref=filters.lane, field="lane", allow_none=True)
            qs = qs.filter(assignee_id=lane)
        except Exception as exc:  # a bad lane is a filter error, not a page error
            filters.errors.append(str(exc))
    if filters.runtime:
        qs = qs.filter(
            Q(author_key__runtime=filters.runtime)
            | Q(
                pk__in=Claim.objects.filter(
                    org_id=actor.org.pk, ended_at__isnull=True, expires_at__gt=now, key__runtime=filters.runtime
                ).values("issue_id")
            )
        )
    try:
        start = _day(filters.created_from, tz, end=False)
        end = _day(filters.created_to, tz, end=True)
        if start:
            qs = qs.filter(created_at__gte=start)
        if end:
            qs = qs.filter(created_at__lte=end)
    except Exception as exc:
        filters.errors.append(str(exc))
    if filters.state == "held":
        qs = qs.filter(lease_expires_at__gt=now)
    elif filters.state == "triage":
        qs = qs.filter(awaiting_triage=True)
    elif filters.state == "blocked":
        qs = qs.filter(Q(status=Status.BLOCKED) | _open_blocker_exists())
    elif filters.state == "ready":
        qs = (
            qs.filter(work=True, awaiting_triage=False, status__in=DISPATCHABLE)
            .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now))
            .exclude(_open_blocker_exists())
        )
    return qs, project


def _searched(qs, *, actor: Actor, filters: QueueFilters) -> tuple:
    """``qs`` narrowed by the search words (if any) and the order to show it in."""
    order = ORDERS[filters.order]
    if filters.search:
        try:
            qs = search_ranked(qs, actor=actor, query=filters.search)
            order = ("-hits", *order)
        except ServiceError as exc:
            filters.errors.append(exc.message)
    return qs, order


def _rows(issues: list, *, actor: Actor, now) -> list[dict]:
    """What a row of the table or a card of the board shows about each issue."""
    shapes = issue_shapes(issues, actor=actor, now=now)
    live = _live_claims_by_issue([i.pk for i in issues], now)
    rows = []
    for issue, shape in zip(issues, shapes, strict=True):
        claim = live.get(issue.pk)
        rows.append({"issue": issue, "s": shape, "claim": claim, "state": row_state(issue, shape, claim)})
    return rows


def _choices(actor: Actor) -> dict:
    runtimes = sorted(set(AgentKey.objects.filter(org_id=actor.org.pk).values_list("runtime", flat=True)))
    members = list(
        Membership.objects.filter(org_id=actor.org.pk, status=Membership.Status.ACTIVE)
        .select_related("user")
        .order_by("user__email")
    )
    return {"runtimes": runtimes, "members": members, "statuses": Status.values}


def queue_page(*, actor: Actor, filters: QueueFilters) -> dict:
    """The queue table, its counts and the filter choices."""
    now = timezone.now()
    projects = list(Project.objects.filter(org_id=actor.org.pk).order_by("prefix"))
    scope = Issue.objects.filter(org_id=actor.org.pk)
    project = next((p for p in projects if p.prefix == filters.project), None) if filters.project else None
    if project is not None:
        scope = scope.filter(project=project)
    by_status = dict(scope.values("status").annotate(n=Count("pk")).values_list("status", "n"))
    qs, project = _filtered(actor=actor, filters=filters, now=now, projects=projects)
    if filters.status == "open":
        qs = qs.exclude(status__in=CLOSED)
    elif filters.status in Status.values:
        qs = qs.filter(status=filters.status)
    qs, order = _searched(qs, actor=actor, filters=filters)
    qs = qs.with_people().order_by(*order, "pk")
    matched = qs.count()  # what the rows are pages of: the header counts the same issues
    issues = list(qs[filters.offset : filters.offset + PAGE + 1])
    more = len(issues) > PAGE
    issues = issues[:PAGE]
    counts = Counter()
    for p in [project] if project else projects:
        for k, v in queue_counts(actor=actor, project_id=p.pk, now=now).items():
            counts[k] += v
    return {
        "rows": _rows(issues, actor=actor, now=now),
        "more": more,
        "filters": filters,
        "projects": projects,
        "by_status": by_status,
        "total": sum(by_status.values()),
        "matched": matched,
        "counts": dict(counts),
        "now": now,
        **_choices(actor),
    }


BOARD_OPEN_CARDS = 100  # per open column; the column's count says how many match
BOARD_CLOSED_CARDS = 10  # done and canceled show their most recently closed


def board_page(*, actor: Actor, filters: QueueFilters) -> dict:
    """The board: one column per status, the same filters as the queue.

    A status filter of one status shows that column only; otherwise every status has a
    column (closed ones collapsed, their most recent first, unless asked for).
    """
    now = timezone.now()
    projects = list(Project.objects.filter(org_id=actor.org.pk).order_by("prefix"))
    qs, _project = _filtered(actor=actor, filters=filters, now=now, projects=projects)
    qs, order = _searched(qs, actor=actor, filters=filters)
    statuses = [filters.status] if filters.status in Status.values else list(Status.values)
    counts = dict(
        qs.order_by()
        .filter(status__in=statuses)
        .values("status")
        .annotate(n=Count("pk", distinct=True))
        .values_list("status", "n")
    )
    columns = []
    for status in statuses:
        closed = status in CLOSED
        column = qs.with_people().filter(status=status)
        if closed:
            column = column.order_by("-closed_at", "-updated_at", "pk")[:BOARD_CLOSED_CARDS]
        else:
            column = column.order_by(*order, "pk")[:BOARD_OPEN_CARDS]
        issues = list(column)
        columns.append(
            {
                "status": status,
                "closed": closed,
                "open": not closed or filters.status in (status, "all"),
                "count": counts.get(status, 0),
                "cards": _rows(issues, actor=actor, now=now),
            }
        )
    return {
        "columns": columns,
        "filters": filters,
        "projects": projects,
        "matched": sum(counts.values()),
        "now": now,
        **_choices(actor),
    }


def fleet_page(*, actor: Actor) -> dict:
    """Live claims across the org, the agents holding them, and recent lease endings."""
    now = timezone.now()
    live = list(
        Claim.objects.filter(org_id=actor.org.pk, ended_at__isnull=True, expires_at__gt=now)
        .select_related("issue__project", "issue__checkpoint", "principal", "key")
        .order_by("expires_at")[:500]
    )
    rows = []
    for c in live:
        cp = c.issue.checkpoint
        resumed = cp is not None and cp.created_at <= c.created_at
        rows.append({"claim": c, "issue": c.issue, "resumed": resumed, "reclaimed": c.issue.reclaim_count})
    recent = list(
        Claim.objects.filter(org_id=actor.org.pk, ended_at__isnull=False)
        .select_related("issue__project", "principal", "key")
        .order_by("-ended_at")[:25]
    )
    per_key = defaultdict(int)
    for c in live:
        per_key[c.key_id] += 1
    agents = list(
        AgentKey.objects.filter(org_id=actor.org.pk, revoked_at__isnull=True, last_used_at__isnull=False)
        .select_related("user")
        .order_by("-last_used_at")[:50]
    )
    return {
        "rows": rows,
        "recent": recent,
        "now": now,
        "agents": [{"key": k, "live": per_key.get(k.pk, 0)} for k in agents],
        "by_runtime": sorted(Counter(c.key.runtime for c in live).items()),
        "usage": usage_totals(org_id=actor.org.pk, since=(now - USAGE_WINDOW).date()),
        "usage_days": USAGE_WINDOW.days,
    }


USAGE_WINDOW = timedelta(days=30)


def member_usage(*, actor: Actor) -> dict:
    """Each member's reported runtime usage over the window, by e-mail: {email: [rows]}."""
    since = (timezone.now() - USAGE_WINDOW).date()
    by_email = defaultdict(list)
    for row in usage_totals(org_id=actor.org.pk, since=since):
        by_email[row["email"]].append(row)
    return dict(by_email)


def issue_page(*, actor: Actor, identifier: str) -> dict:
    """Everything the drill-down shows about one issue (NOT_FOUND outside the org)."""

    now = timezone.now()
    found = issue_resolve(actor=actor, identifier=identifier)
    issue = Issue.objects.with_people().select_related("parent__project").get(pk=found.pk)
    shape = issue_shapes([issue], actor=actor, now=now)[0]
    claim = _live_claims_by_issue([issue.pk], now).get(issue.pk)
    other = (
        Relation.objects.filter(Q(source=issue) | Q(target=issue))
        .exclude(type=Relation.Type.BLOCKS)
        .select_related("source__project", "target__project")
    )
    related = [{"type": r.type, "other": (r.target if r.source_id == issue.pk else r.source)} for r in other]
    blockers = list(Relation.objects.filter(target=issue, type=Relation.Type.BLOCKS).select_related("source__project"))
    unblocks = list(Relation.objects.filter(source=issue, type=Relation.Type.BLOCKS).select_related("target__project"))
    checkpoints = list(Checkpoint.objects.filter(issue=issue).select_related("author", "key").order_by("-created_at")[:50])
    comments = list(Comment.objects.filter(issue=issue).select_related("author", "retracted_by").order_by("created_at"))
    attachments = list(Attachment.objects.filter(issue=issue).order_by("created_at"))
    activity = [activity_shape(a) for a in activity_for_issue(issue=issue)]
    _people_in_receipts(actor, activity)
    evidence = shape["evidence"] + [None] * len(shape["acceptance"])
    acceptance = [
        {
            "text": acceptance_rules.criterion_text(c),
            "check": acceptance_rules.criterion_check(c),
            "evidence": acceptance_rules.evidence_text(e) if e else None,
            "failure": acceptance_rules.failure(c, e) if e else None,
        }
        for c, e in zip(shape["acceptance"], evidence, strict=False)
    ]
    broken = check_org_cached(actor.org).broken  # incremental from the last verified head
    members = list(
        Membership.objects.filter(org_id=actor.org.pk, status=Membership.Status.ACTIVE)
        .select_related("user")
        .order_by("user__email")
    )
    return {
        "issue": issue,
        "s": shape,
        "claim": claim,
        "state": row_state(issue, shape, claim),
        "blockers": blockers,
        "unblocks": unblocks,
        "related": related,
        "checkpoints": checkpoints,
        "comments": comments,
        "attachments": attachments,
        "activity": activity,
        "acceptance": acceptance,
        "chain_break": broken,
        "chain_length": actor.org.__class__.objects.values_list("activity_seq", flat=True).get(pk=actor.org.pk),
        "members": members,
        "now": now,
        "closed": issue.status in CLOSED,
    }


def _people_in_receipts(actor: Actor, activity: list[dict]) -> None:
    """Receipts name an assignee by user id; show the member's e-mail instead."""
    ids = {v for e in activity for v in (e["changes"] or {}).get("assignee", []) or [] if isinstance(v, int)}
    if not ids:
        return
    emails = dict(Membership.objects.filter(org_id=actor.org.pk, user_id__in=ids).values_list("user_id", "user__email"))
    for e in activity:
        change = (e["changes"] or {}).get("assignee")
        if isinstance(change, list):
            e["changes"]["assignee"] = [emails.get(v, v) if isinstance(v, int) else v for v in change]


def keys_page(*, actor: Actor) -> dict:
    """Agent keys: owners see the org's, members their own. Session keys are listed under their parent."""
    qs = AgentKey.objects.filter(org_id=actor.org.pk, parent__isnull=True).select_related("user", "project")
    if not actor.is_owner:
        qs = qs.filter(user_id=actor.principal_id)
    keys = list(qs.order_by("revoked_at", "-created_at")[:500])
    sessions = dict(
        AgentKey.objects.filter(parent__in=keys, revoked_at__isnull=True)
        .values("parent_id")
        .annotate(n=Count("pk"))
        .values_list("parent_id", "n")
    )
    now = timezone.now()
    live = dict(
        Claim.objects.filter(org_id=actor.org.pk, ended_at__isnull=True, expires_at__gt=now)
        .values("key_id")
        .annotate(n=Count("pk"))
        .values_list("key_id", "n")
    )
    return {"keys": [{"key": k, "sessions": sessions.get(k.pk, 0), "live": live.get(k.pk, 0)} for k in keys]}


def claimable_placeholders(*, actor: Actor, email: str) -> set[int]:
    """Ids of the org's placeholders whose recorded upstream address is ``email``, the
    signed-in person's own (verified: the Dash acts in an org only for a verified address),
    for the "This is me" button; ``placeholder_claim`` checks again."""
    email = (email or "").strip()
    if not email or actor.membership is None:
        return set()
    return set(
        Membership.objects.filter(
            org_id=actor.org.pk, status=Membership.Status.PLACEHOLDER, upstream_email__iexact=email
        ).values_list("pk", flat=True)
    )
