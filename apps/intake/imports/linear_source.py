"""Linear, through its GraphQL API (apps.intake.linear): teams become projects (the team
key is the prefix), issues keep their identifiers (``ENG-42`` stays ``ENG-42``).

Workflow state types map to statuses: triage -> todo awaiting triage; backlog and
unstarted -> todo; started -> doing; completed -> done; canceled -> canceled. Linear's
priority 0-4 means what Retasc's does (0 none, 1 urgent ... 4 low). Sub-issues keep their
parent, which becomes a container. Relations: blocks, duplicate, related (similar ->
related). Comments keep their order; a reply names the comment it answers. Attachments
arrive as links. One page of issues is one batch; the page cursor is the checkpoint, so
an interrupted run asks for the next page, not the first.
"""

from __future__ import annotations

from apps.intake.imports.base import Batch, when
from apps.intake.imports.records import (
    AttachmentRec,
    CommentRec,
    IssueRec,
    LabelRec,
    Person,
    ProjectRec,
    RelationRec,
    SourceError,
)
from apps.intake.linear import PAGE, LinearAuthError, LinearClient

STATES = {
    "triage": "todo",
    "backlog": "todo",
    "unstarted": "todo",
    "started": "doing",
    "completed": "done",
    "canceled": "canceled",
    "duplicate": "canceled",
}
RELATIONS = {"blocks": "blocks", "duplicate": "duplicate", "related": "related", "similar": "related"}


def _person(node, people: dict) -> str | None:
    if not isinstance(node, dict) or not node.get("id"):
        return None
    if node["id"] not in people:
        people[node["id"]] = Person(node["id"], node.get("name") or node.get("displayName") or "", node.get("email") or "")
    return node["id"]


def issue_record(node: dict, people: dict) -> tuple[IssueRec, list[RelationRec], list[LabelRec]]:
    state = (node.get("state") or {}).get("type") or "unstarted"
    status = STATES.get(state, "todo")
    team = (node.get("team") or {}).get("key") or node["identifier"].rsplit("-", 1)[0]
    rec = IssueRec(
        ext_id=node["id"],
        project=team,
        title=node.get("title") or "(untitled)",
        number=node.get("number"),
        ref=node.get("identifier") or "",
        url=node.get("url") or "",
        body=node.get("description") or None,
        status=status,
        priority=int(node.get("priority") or 0),
        due_at=node.get("dueDate") or None,
        assignee=_person(node.get("assignee"), people),
        author=_person(node.get("creator"), people),
        parent=(node.get("parent") or {}).get("id"),
        created_at=when(node.get("createdAt")),
        updated_at=when(node.get("updatedAt")),
        closed_at=when(node.get("completedAt") or node.get("canceledAt")),
        awaiting_triage=state == "triage",
        source="linear",
        source_ref=node.get("url") or node.get("identifier") or "",
    )
    if status == "canceled":
        rec.cancel_reason = "Canceled in Linear." if state == "canceled" else "A duplicate in Linear."
    labels = []
    for lb in ((node.get("labels") or {}).get("nodes")) or []:
        if lb.get("name"):
            rec.labels.append(lb["name"])
            labels.append(LabelRec(lb["name"], lb.get("color")))
    comments = sorted(((node.get("comments") or {}).get("nodes")) or [], key=lambda c: c.get("createdAt") or "")
    for c in comments:
        rec.comments.append(
            CommentRec(
                f"comment/{c['id']}",
                _person(c.get("user"), people),
                c.get("body") or "",
                when(c.get("createdAt")),
                reply_to=f"comment/{c['parent']['id']}" if c.get("parent") else None,
            )
        )
    by_id = {cr.ext_id: cr for cr in rec.comments}
    for cr in rec.comments:
        if cr.reply_to:  # Retasc comments are flat: the reply's first line names its parent
            parent = by_id.get(cr.reply_to)
            who = people[parent.author].name if parent and parent.author in people else ""
            stamp = parent.created_at.strftime("%Y-%m-%d %H:%M UTC") if parent and parent.created_at else ""
            cr.reply_to = f"{who or 'someone'}'s comment" + (f" of {stamp}" if stamp else "")
    for a in ((node.get("attachments") or {}).get("nodes")) or []:
        if a.get("url"):
            rec.attachments.append(
                AttachmentRec(f"attachment/{a['id']}", a["url"], a.get("title"), None, when(a.get("createdAt")))
            )
    relations = []
    for r in ((node.get("relations") or {}).get("nodes")) or []:
        other = (r.get("relatedIssue") or {}).get("id")
        kind = RELATIONS.get(r.get("type") or "")
        if other and kind:
            relations.append(RelationRec(node["id"], other, kind))
    return rec, relations, labels


class LinearSource:
    name = "linear"

    def __init__(self, *, api_key: str, teams: list[str] | None = None, url: str | None = None, sleep=None):
        kwargs = {"sleep": sleep} if sleep is not None else {}
        self.client = LinearClient(api_key=api_key, url=url, **kwargs)
        self.wanted = [t.strip().upper() for t in teams or [] if t and t.strip()]
        self.teams: list[dict] = []

    def check(self) -> None:
        """Up front: the key works and the teams asked for exist (nothing written otherwise)."""
        try:
            self.client.viewer()
            teams = self.client.teams()
        except LinearAuthError as exc:
            raise SourceError(exc.message, field="apiKey") from None
        by_key = {t["key"].upper(): t for t in teams}
        missing = [k for k in self.wanted if k not in by_key]
        if missing:
            raise SourceError(f"Linear has no team {missing[0]!r} that this key can read.", field="teams")
        self.teams = [by_key[k] for k in self.wanted] if self.wanted else teams

    def batches(self, checkpoint: dict):
        if not self.teams:
            self.check()
        team_index = int(checkpoint.get("team") or 0)
        cursor = checkpoint.get("cursor")
        projects = [ProjectRec(t["key"], t["key"], t.get("name") or t["key"], when(t.get("createdAt"))) for t in self.teams]
        total = sum(int(t.get("issueCount") or 0) for t in self.teams) or None
        yield Batch(projects=projects, checkpoint={"team": team_index, "cursor": cursor}, total=total)
        for index in range(team_index, len(self.teams)):
            key = self.teams[index]["key"]
            after = cursor if index == team_index else None
            while True:
                page = self.client.issues_page(key, after, PAGE)
                people: dict = {}
                issues, relations, labels, warnings = [], [], {}, []
                for node in page.get("nodes") or []:
                    if ((node.get("comments") or {}).get("pageInfo") or {}).get("hasNextPage"):
                        warnings.append((node.get("identifier") or node["id"], "more than 100 comments: the first 100 came in"))
                    rec, rels, lbs = issue_record(node, people)
                    issues.append(rec)
                    relations.extend(rels)
                    for lb in lbs:
                        labels.setdefault(lb.name, lb)
                numbers = [r.number for r in issues if r.number]
                projects_here = [ProjectRec(key, key, counter=max(numbers))] if numbers else []
                info = page.get("pageInfo") or {}
                more = bool(info.get("hasNextPage"))
                after = info.get("endCursor")
                next_point = {"team": index, "cursor": after} if more else {"team": index + 1, "cursor": None}
                yield Batch(
                    people=list(people.values()),
                    projects=projects_here,
                    labels=list(labels.values()),
                    issues=issues,
                    relations=relations,
                    checkpoint=next_point,
                    total=total,
                    warnings=warnings,
                )
                if not more:
                    break

    def close(self) -> None:
        self.client.close()
