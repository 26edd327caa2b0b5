"""One function per SPEC §5 tool: the single entry point MCP and the HTTP API share.

Each ``<tool>(actor, *, <camelCase SPEC arguments>)`` parses its arguments, calls one
service or selector, and returns a JSON-able dict in the SPEC §15 shapes. Refusals are
``ServiceError`` (the interface renders ``.as_dict()`` and ``.http_status``). Reads are
charged with ``metered_read(actor, <tool name>)`` after they succeed; services that meter
themselves (``check_claim``, a ``next_batch`` peek, an empty ``next_issue``,
``prepare_attachment_upload``) are not charged twice.

An argument passed as ``None`` means "not given" everywhere (an interface may hand over
JSON nulls); clearing a value uses the SPEC's words instead (``assignee: "none"``,
``parent: "none"``, ``dueAt: ""``).
"""

from __future__ import annotations

from apps.billing import selectors as billing_selectors
from apps.core.errors import invalid
from apps.core.unit import metered_read
from apps.intake import connectors
from apps.issues import inputs
from apps.issues import services as issue_services
from apps.issues.selectors import (
    activity_for_issue,
    attachment_get,
    attachments_list,
    comments_list,
    issue_list,
    issue_resolve,
    issue_with_people,
    labels_list,
    project_get,
)
from apps.issues.services import (
    attachment_create,
    attachment_obsolete,
    comment_create,
    comment_retract,
    label_save,
    relation_add,
    relation_remove,
)
from apps.issues.shapes import activity_shape, attachment_shape, comment_shape, issue_shape, issue_shapes
from apps.leases import services as lease_services
from apps.leases.revocation import member_reactivate, member_retire, member_suspend
from apps.leases.selectors import queue_status as queue_read
from apps.orgs.actor import Actor
from apps.orgs.selectors import members_list, projects_list
from apps.orgs.selectors import whoami as whoami_read
from apps.orgs.services import session_key_mint

# The tools, in SPEC §5 order. Interfaces iterate this to stay complete.
TOOLS = (
    "whoami",
    "mint_session_key",
    "next_issue",
    "next_batch",
    "claim_issue",
    "check_claim",
    "heartbeat",
    "checkpoint",
    "release_issue",
    "save_issue",
    "get_issue",
    "list_issues",
    "get_activity",
    "save_comment",
    "list_comments",
    "retract_comment",
    "add_relation",
    "remove_relation",
    "save_label",
    "list_labels",
    "save_attachment",
    "prepare_attachment_upload",
    "list_attachments",
    "get_attachment",
    "obsolete_attachment",
    "list_members",
    "suspend_member",
    "reactivate_member",
    "retire_member",
    "list_connectors",
    "revoke_connector",
    "queue_status",
    "get_project",
    "list_projects",
    "usage_summary",
    "billing_summary",
)


def _flag(value, field: str) -> bool:
    return False if value is None else inputs.boolean(value, field)


def _fresh_issue_shape(actor: Actor, issue) -> dict:
    # Re-read after commit: effective ranks are refreshed after the write commits (unless
    # the write read it back in its transaction because no refresh follows).
    fresh = getattr(issue, "read_back", None)
    return issue_shape(fresh if fresh is not None else issue_with_people(issue.pk), actor=actor)


# --- identity -------------------------------------------------------------------------


def whoami(actor: Actor) -> dict:
    answer = whoami_read(actor=actor)
    metered_read(actor, "whoami")
    return answer


def mint_session_key(actor: Actor, *, label=None) -> dict:
    label = inputs.text(label, "label", limit=120, one_line=True) or ""
    key, raw = session_key_mint(actor=actor, label=label)
    return {"agentKey": raw, "label": key.label, "prefix": key.prefix}


# --- work loop ------------------------------------------------------------------------


def next_issue(actor: Actor, *, allLanes=None) -> dict:
    return lease_services.next_issue(actor=actor, all_lanes=_flag(allLanes, "allLanes"))


def next_batch(actor: Actor, *, n=None, claim=None, allLanes=None) -> dict:
    return lease_services.next_batch(
        actor=actor, n=5 if n is None else n, claim=_flag(claim, "claim"), all_lanes=_flag(allLanes, "allLanes")
    )


def claim_issue(actor: Actor, *, identifier, claimToken=None) -> dict:
    return lease_services.claim_issue(actor=actor, identifier=identifier, claim_token=claimToken or None)


def check_claim(actor: Actor, *, identifier) -> dict:
    return lease_services.check_claim(actor=actor, identifier=identifier)  # meters itself


def heartbeat(actor: Actor, *, identifier, claimToken) -> dict:
    return lease_services.heartbeat(actor=actor, identifier=identifier, claim_token=claimToken)


def checkpoint(actor: Actor, *, identifier, note, claimToken) -> dict:
    return lease_services.checkpoint(actor=actor, identifier=identifier, note=note, claim_token=claimToken)


def release_issue(actor: Actor, *, identifier, claimToken, note=None) -> dict:
    return lease_services.release_issue(actor=actor, identifier=identifier, claim_token=claimToken, note=note)


# --- issues ---------------------------------------------------------------------------

# save_issue argument -> issue_update keyword.
_UPDATE_ARGS = {
    "title": "title",
    "body": "body",
    "work": "work",
    "blockedBy": "blocked_by",
    "noDependency": "no_dependency",
    "status": "status",
    "assignee": "assignee",
    "priority": "priority",
    "dueAt": "due_at",
    "labels": "labels",
    "acceptance": "acceptance",
    "evidence": "evidence",
    "cancelReason": "cancel_reason",
    "parent": "parent",
}


def save_issue(
    actor: Actor,
    *,
    identifier=None,
    title=None,
    body=None,
    work=None,
    blockedBy=None,
    noDependency=None,
    status=None,
    assignee=None,
    priority=None,
    dueAt=None,
    labels=None,
    acceptance=None,
    evidence=None,
    cancelReason=None,
    parent=None,
    claimToken=None,
) -> dict:
    """Create (no ``identifier``) or update (only the arguments given; ``blockedBy`` adds blockers)."""

    args = {
        "title": title,
        "body": body,
        "work": work,
        "blockedBy": blockedBy,
        "noDependency": noDependency,
        "status": status,
        "assignee": assignee,
        "priority": priority,
        "dueAt": dueAt,
        "labels": labels,
        "acceptance": acceptance,
        "evidence": evidence,
        "cancelReason": cancelReason,
        "parent": parent,
    }
    given = {_UPDATE_ARGS[k]: v for k, v in args.items() if v is not None}
    if identifier is None or identifier == "":
        for name in ("evidence", "cancelReason"):
            if args[name] is not None:
                raise invalid(name, f"{name} applies to an existing issue; create it first, then save it with its identifier.")
        given.pop("title", None), given.pop("work", None)
        issue = issue_services.issue_create(actor=actor, title=title, work=work, **given)
    else:
        issue = issue_services.issue_update(
            actor=actor, identifier=identifier, claim_token=claimToken or None, read_back=True, **given
        )
    return _fresh_issue_shape(actor, issue)


def get_issue(actor: Actor, *, identifier) -> dict:
    answer = _fresh_issue_shape(actor, issue_resolve(actor=actor, identifier=identifier))
    metered_read(actor, "get_issue")
    return answer


def list_issues(
    actor: Actor,
    *,
    query=None,
    status=None,
    priority=None,
    label=None,
    author=None,
    assignee=None,
    slaState=None,
    limit=None,
    cursor=None,
) -> dict:
    rows, next_cursor = issue_list(
        actor=actor,
        status=status,
        priority=priority,
        label=label,
        author=author,
        assignee=assignee,
        sla_state=slaState,
        limit=50 if limit is None else limit,
        cursor=cursor,
        query=query,
    )
    answer = {"issues": issue_shapes(rows, actor=actor), "nextCursor": next_cursor}
    metered_read(actor, "list_issues")
    return answer


def get_activity(actor: Actor, *, identifier) -> dict:
    issue = issue_resolve(actor=actor, identifier=identifier)
    answer = {"identifier": issue.identifier, "activity": [activity_shape(e) for e in activity_for_issue(issue=issue)]}
    metered_read(actor, "get_activity")
    return answer


# --- collaboration --------------------------------------------------------------------


def _identifier(tool: str, identifier, issue) -> str:
    """The issue a tool names: ``identifier``, as every tool names it; ``issue`` is the old
    name of the argument, still accepted for one release."""
    if identifier is None and issue is None:
        raise invalid("identifier", f"{tool} needs identifier.")
    if identifier is not None and issue is not None and str(identifier) != str(issue):
        raise invalid("issue", "identifier and issue (its old name) name different issues; give identifier only.")
    return identifier if identifier is not None else issue


def save_comment(actor: Actor, *, identifier=None, body=None, issue=None) -> dict:
    issue = _identifier("save_comment", identifier, issue)
    return comment_shape(comment_create(actor=actor, issue=issue, body=body))


def list_comments(actor: Actor, *, identifier=None, issue=None) -> dict:
    issue = _identifier("list_comments", identifier, issue)
    answer = {"comments": [comment_shape(c) for c in comments_list(actor=actor, issue=issue)]}
    metered_read(actor, "list_comments")
    return answer


def retract_comment(actor: Actor, *, comment, note) -> dict:
    return comment_shape(comment_retract(actor=actor, comment=comment, note=note))


def add_relation(actor: Actor, *, sourceId, targetId, type) -> dict:
    return relation_add(actor=actor, source_id=sourceId, target_id=targetId, type=type)


def remove_relation(actor: Actor, *, sourceId, targetId, type) -> dict:
    return relation_remove(actor=actor, source_id=sourceId, target_id=targetId, type=type)


def _label_shape(label) -> dict:
    return {"name": label.name, "color": label.color}


def save_label(actor: Actor, *, name, color=None) -> dict:
    return _label_shape(label_save(actor=actor, name=name, color=color))


def list_labels(actor: Actor) -> dict:
    answer = {"labels": [_label_shape(label) for label in labels_list(actor=actor)]}
    metered_read(actor, "list_labels")
    return answer


# --- attachments ----------------------------------------------------------------------


def save_attachment(actor: Actor, *, identifier=None, url=None, title=None, issue=None) -> dict:
    issue = _identifier("save_attachment", identifier, issue)
    return attachment_shape(attachment_create(actor=actor, issue=issue, url=url, title=title))


def prepare_attachment_upload(actor: Actor, *, identifier=None, issue=None) -> dict:
    issue = _identifier("prepare_attachment_upload", identifier, issue)
    return issue_services.attachment_upload_prepare(actor=actor, issue=issue)  # meters itself


def list_attachments(actor: Actor, *, identifier=None, issue=None) -> dict:
    issue = _identifier("list_attachments", identifier, issue)
    answer = {"attachments": [attachment_shape(a) for a in attachments_list(actor=actor, issue=issue)]}
    metered_read(actor, "list_attachments")
    return answer


def get_attachment(actor: Actor, *, attachment) -> dict:
    answer = attachment_shape(attachment_get(actor=actor, attachment=attachment))
    metered_read(actor, "get_attachment")
    return answer


def obsolete_attachment(actor: Actor, *, attachment, reason) -> dict:
    return attachment_shape(attachment_obsolete(actor=actor, attachment=attachment, reason=reason))


# --- org admin ------------------------------------------------------------------------


def list_members(actor: Actor, *, query=None) -> dict:
    answer = {"members": members_list(actor=actor, query=query)}
    metered_read(actor, "list_members")
    return answer


def suspend_member(actor: Actor, *, memberId) -> dict:
    return member_suspend(actor=actor, member_id=memberId)


def reactivate_member(actor: Actor, *, memberId) -> dict:
    return member_reactivate(actor=actor, member_id=memberId)


def retire_member(actor: Actor, *, memberId) -> dict:
    return member_retire(actor=actor, member_id=memberId)


def list_connectors(actor: Actor) -> dict:
    answer = {"connectors": connectors.connectors_list(actor=actor)}
    metered_read(actor, "list_connectors")
    return answer


def revoke_connector(actor: Actor, *, connectorId) -> dict:
    return connectors.connector_revoke(actor=actor, connector_id=connectorId)


# Not MCP tools: operations the HTTP API (and so the CLI) adds for people.
NON_TOOL_OPERATIONS = ("add_connector", "get_connector", "triage_issue")


def add_connector(actor: Actor, *, provider, project, repo, token=None, apiUrl=None, prSync=None) -> dict:
    return connectors.connector_create(
        actor=actor, provider=provider, project=project, repo=repo, token=token, api_url=apiUrl, pr_sync=prSync
    )


def get_connector(actor: Actor, *, connectorId) -> dict:
    answer = connectors.connector_log(actor=actor, connector_id=connectorId)
    metered_read(actor, "get_connector")
    return answer


def triage_issue(actor: Actor, *, identifier, accept, reason=None) -> dict:
    issue = issue_services.issue_triage(actor=actor, identifier=identifier, accept=accept, reason=reason)
    return _fresh_issue_shape(actor, issue)


# --- observability --------------------------------------------------------------------


def queue_status(actor: Actor) -> dict:
    answer = queue_read(actor=actor)
    metered_read(actor, "queue_status")
    return answer


def get_project(actor: Actor, *, prefix=None) -> dict:
    answer = project_get(actor=actor, prefix=prefix)
    metered_read(actor, "get_project")
    return answer


def list_projects(actor: Actor) -> dict:
    answer = {"projects": projects_list(actor=actor)}
    metered_read(actor, "list_projects")
    return answer


def usage_summary(actor: Actor) -> dict:
    answer = billing_selectors.usage_summary(actor=actor)
    metered_read(actor, "usage_summary")
    return answer


def billing_summary(actor: Actor) -> dict:
    answer = billing_selectors.billing_summary(actor=actor)
    metered_read(actor, "billing_summary")
    return answer
