"""Provider payloads -> one upstream event shape (``Upstream``), so the rules that apply
it (apps.intake.inbound) are written once for GitHub and GitLab.

GitHub: ``issues`` (opened, edited, closed, reopened, labeled, unlabeled, milestoned,
demilestoned), ``issue_comment`` (created), ``pull_request`` (closed), ``ping``.
GitLab: ``Issue Hook`` (open, update, close, reopen), ``Note Hook`` on issues,
``Merge Request Hook`` (merge, close). Anything else normalizes to ``None`` (ignored).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.core.errors import invalid

ISSUE, COMMENT, MERGE, PING = "issue", "comment", "merge", "ping"


@dataclass
class Upstream:
    kind: str
    action: str
    repo: str = ""
    upstream_id: str = ""
    number: int = 0
    title: str = ""
    body: str = ""
    author: str = ""
    labels: list[str] = field(default_factory=list)
    due: str | None = None
    open: bool = True
    url: str = ""
    changed: set[str] = field(default_factory=set)  # title, body, labels, due
    comment: str = ""
    merged: bool = False
    branch: str = ""


def _obj(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise invalid("payload", f"The payload has no {where} object.")
    return value


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def github(event: str, payload: dict) -> Upstream | None:
    payload = _obj(payload, "top-level")
    if event == "ping":
        repo = _str((payload.get("repository") or {}).get("full_name"))
        return Upstream(kind=PING, action="ping", repo=repo)
    repo = _str(_obj(payload.get("repository"), "repository").get("full_name"))
    action = _str(payload.get("action"))
    if event == "pull_request":
        pr = _obj(payload.get("pull_request"), "pull_request")
        if action != "closed":
            return None
        return Upstream(
            kind=MERGE,
            action=action,
            repo=repo,
            title=_str(pr.get("title")),
            body=_str(pr.get("body")),
            merged=bool(pr.get("merged")),
            branch=_str((pr.get("head") or {}).get("ref")),
        )
    if event not in ("issues", "issue_comment"):
        return None
    issue = _obj(payload.get("issue"), "issue")
    if "pull_request" in issue:
        return None  # a comment on a pull request: not an issue
    up = Upstream(
        kind=ISSUE,
        action=action,
        repo=repo,
        upstream_id=str(issue.get("id") or ""),
        number=int(issue.get("number") or 0),
        title=_str(issue.get("title")),
        body=_str(issue.get("body")),
        author=_str((issue.get("user") or {}).get("login")),
        labels=[_str(label.get("name")) for label in issue.get("labels") or [] if isinstance(label, dict)],
        due=_str((issue.get("milestone") or {}).get("due_on")) or None,
        open=issue.get("state") != "closed",
        url=_str(issue.get("html_url")),
    )
    if not up.upstream_id or not up.number:
        raise invalid("payload", "The issue has no id or number.")
    if event == "issue_comment":
        if action != "created":
            return None
        comment = _obj(payload.get("comment"), "comment")
        up.kind, up.comment = COMMENT, _str(comment.get("body"))
        up.author = _str((comment.get("user") or {}).get("login"))
        return up
    if action == "edited":
        up.changed = {"title", "body"} & set((payload.get("changes") or {}).keys())
    elif action in ("labeled", "unlabeled"):
        up.changed = {"labels"}
    elif action in ("milestoned", "demilestoned"):
        up.changed = {"due"}
    elif action not in ("opened", "closed", "reopened"):
        return None
    return up


_GITLAB_ACTIONS = {"open": "opened", "close": "closed", "reopen": "reopened", "update": "edited"}
_GITLAB_CHANGES = {"title": "title", "description": "body", "labels": "labels", "due_date": "due", "milestone_id": "due"}


def gitlab(event: str, payload: dict) -> Upstream | None:
    payload = _obj(payload, "top-level")
    repo = _str(_obj(payload.get("project"), "project").get("path_with_namespace"))
    attrs = _obj(payload.get("object_attributes"), "object_attributes")
    user = _str((payload.get("user") or {}).get("username"))
    if event == "Merge Request Hook":
        action = _str(attrs.get("action"))
        if action not in ("merge", "close"):
            return None
        return Upstream(
            kind=MERGE,
            action=action,
            repo=repo,
            title=_str(attrs.get("title")),
            body=_str(attrs.get("description")),
            merged=action == "merge" or attrs.get("state") == "merged",
            branch=_str(attrs.get("source_branch")),
        )
    if event == "Note Hook":
        if attrs.get("noteable_type") != "Issue":
            return None
        issue = _obj(payload.get("issue"), "issue")
        return Upstream(
            kind=COMMENT,
            action="created",
            repo=repo,
            upstream_id=str(issue.get("id") or ""),
            number=int(issue.get("iid") or 0),
            title=_str(issue.get("title")),
            body=_str(issue.get("description")),
            author=user,
            comment=_str(attrs.get("note")),
            open=issue.get("state") != "closed",
            url=_str(issue.get("url")),
        )
    if event not in ("Issue Hook", "Confidential Issue Hook"):
        return None
    action = _GITLAB_ACTIONS.get(_str(attrs.get("action")))
    if action is None:
        return None
    up = Upstream(
        kind=ISSUE,
        action=action,
        repo=repo,
        upstream_id=str(attrs.get("id") or ""),
        number=int(attrs.get("iid") or 0),
        title=_str(attrs.get("title")),
        body=_str(attrs.get("description")),
        author=user,
        labels=[_str(label.get("title")) for label in payload.get("labels") or [] if isinstance(label, dict)],
        due=_str(attrs.get("due_date")) or None,
        open=attrs.get("state") != "closed",
        url=_str(attrs.get("url")),
    )
    if not up.upstream_id or not up.number:
        raise invalid("payload", "The issue has no id or iid.")
    if action == "edited":
        up.changed = {_GITLAB_CHANGES[k] for k in (payload.get("changes") or {}) if k in _GITLAB_CHANGES}
    return up
