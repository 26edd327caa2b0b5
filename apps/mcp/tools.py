"""The MCP tools: one per ``apps.tools.operations`` function, with a hand-written compact schema.

Every tool does the same three things (STYLE §1): rebuild the Actor from the bearer key
the transport verified, call the one operation of the same name, and render the answer:

- success: ``structuredContent`` = the SPEC §15 JSON, plus the same JSON as text;
- refusal: ``isError: true`` with ``{code, message, ...details, tellHuman?}`` as both
  structured content and text (``ServiceError.as_dict()``), exactly what the HTTP API sends.

Schemas are written by hand, not generated from type hints: generated ones repeat titles,
``anyOf [T, null]`` and defaults per argument and would double the cost of ``tools/list``
in every agent's context. Argument checking is the operations' job (``apps.issues.inputs``)
so that a wrong argument answers ``INVALID_ARGUMENT`` JSON like any other refusal; the SDK's
own argument model therefore accepts anything (every parameter is ``Any = None``). A JSON
``null`` argument means "not given". An argument the tool does not have answers ``INVALID``
naming it (SPEC §5), as the HTTP API does for a body field its endpoint does not take.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import OperationalError
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from apps.core.errors import ServiceError, invalid, unknown_argument
from apps.core.metrics import refusals, tool_calls, tool_latency
from apps.mcp.db import database_turn, in_thread
from apps.orgs.actor import Actor
from apps.orgs.services import UNAUTHORIZED, agent_key_authenticate
from apps.tools import operations

log = logging.getLogger(__name__)

S = {"type": "string"}
B = {"type": "boolean"}
I = {"type": "integer"}  # noqa: E741
STRS = {"type": "array", "items": S}


def _d(schema: dict, text: str) -> dict:
    return {**schema, "description": text}


IDENT = _d(S, "e.g. ACME-12")
TOKEN = _d(S, "claimToken from your claim")
HUMAN = _d(S, "e-mail, member id or me")
MEMBER = {"type": ["string", "integer"], "description": "member id or e-mail"}
STATUS = {"type": "string", "enum": ["todo", "doing", "blocked", "review", "done", "canceled"]}
PRIORITY = {"type": "integer", "enum": [0, 1, 2, 3, 4], "description": "0 none, 1 urgent, 2 high, 3 medium, 4 low"}
RELATION = {"type": "string", "enum": ["blocks", "blocked_by", "related", "duplicate"]}
NOTE = {"type": ["string", "object"], "description": "text or {done,next,gotchas,branch}"}


@dataclass(frozen=True)
class Spec:
    name: str
    description: str
    params: dict = field(default_factory=dict)
    required: tuple = ()
    read_only: bool = False
    # Alternative sets of required arguments (JSON Schema ``anyOf``), where one tool does
    # two things: save_issue updates (identifier) or creates (title, work and a blocker
    # or the reason it has none).
    required_any: tuple = ()


SPECS = (
    Spec("whoami", "Your principal, runtime, key, org and project.", read_only=True),
    Spec("mint_session_key", "Mint a child key with your access for this session. Returns {agentKey,label}.", {"label": S}),
    Spec(
        "next_issue",
        "Claim the next ready issue (your lane + unassigned; allLanes widens). "
        "Returns a claim {issue,claimToken,branch,resumed,checkpoint,...} or {issue:null,ready,...}.",
        {"allLanes": B},
    ),
    Spec(
        "next_batch",
        "Up to n (1-25, default 5) mutually independent ready issues. claim:true claims all.",
        {"n": I, "claim": B, "allLanes": B},
    ),
    Spec(
        "claim_issue",
        "Claim one issue (any lane). With your live claimToken: rebind it to this session.",
        {"identifier": IDENT, "claimToken": TOKEN},
        ("identifier",),
    ),
    Spec("check_claim", "Who holds an issue's lease, and until when.", {"identifier": IDENT}, ("identifier",), True),
    Spec("heartbeat", "Renew your lease.", {"identifier": IDENT, "claimToken": TOKEN}, ("identifier", "claimToken")),
    Spec(
        "checkpoint",
        "Save your handoff note (survives release and reclaim); renews the lease.",
        {"identifier": IDENT, "note": NOTE, "claimToken": TOKEN},
        ("identifier", "note", "claimToken"),
    ),
    Spec(
        "release_issue",
        "Give a claimed issue back; a note becomes its checkpoint.",
        {"identifier": IDENT, "claimToken": TOKEN, "note": NOTE},
        ("identifier", "claimToken"),
    ),
    Spec(
        "save_issue",
        "Create (no identifier; needs title, work, and blockedBy or noDependency) or update the given "
        "fields. Held issues need claimToken. done: evidence per acceptance criterion. review: assignee + checkpoint.",
        {
            "identifier": IDENT,
            "title": S,
            "body": _d(S, "markdown"),
            "work": _d(B, "false: container"),
            "blockedBy": _d(STRS, "identifiers; adds blockers"),
            "noDependency": _d(S, "why it has no blocker"),
            "status": STATUS,
            "assignee": _d(S, "e-mail, member id, me or none"),
            "priority": PRIORITY,
            "dueAt": {"type": ["string", "integer"], "description": "date, ISO datetime or epoch ms"},
            "labels": STRS,
            "acceptance": {"type": "array", "description": "done criteria: text or {text,check}"},
            "evidence": {"type": ["array", "object"], "description": "one entry per acceptance criterion"},
            "cancelReason": S,
            "parent": _d(S, "container identifier or none"),
            "claimToken": TOKEN,
        },
        required_any=(("identifier",), ("title", "work", "blockedBy"), ("title", "work", "noDependency")),
    ),
    Spec("get_issue", "One issue.", {"identifier": IDENT}, ("identifier",), True),
    Spec(
        "list_issues",
        "Issues, newest first; with query, best matches first. Returns {issues,nextCursor}.",
        {
            "query": _d(S, "words of titles and bodies"),
            "status": STATUS,
            "priority": PRIORITY,
            "label": S,
            "author": HUMAN,
            "assignee": HUMAN,
            "slaState": {"type": "string", "enum": ["ok", "warning", "breaching", "breached"]},
            "limit": _d(I, "1-200, default 50"),
            "cursor": S,
        },
        (),
        True,
    ),
    Spec("get_activity", "An issue's receipts (who, what, when, before/after).", {"identifier": IDENT}, ("identifier",), True),
    Spec("save_comment", "Comment on an issue.", {"identifier": IDENT, "body": _d(S, "markdown")}, ("identifier", "body")),
    Spec("list_comments", "An issue's comments.", {"identifier": IDENT}, ("identifier",), True),
    Spec(
        "retract_comment",
        "Strike a comment through with a note (never deleted).",
        {"comment": _d(S, "comment id"), "note": S},
        ("comment", "note"),
    ),
    Spec(
        "add_relation",
        "Relate two issues. blocks edges that close a cycle are refused.",
        {"sourceId": IDENT, "targetId": IDENT, "type": RELATION},
        ("sourceId", "targetId", "type"),
    ),
    Spec(
        "remove_relation",
        "Remove a relation.",
        {"sourceId": IDENT, "targetId": IDENT, "type": RELATION},
        ("sourceId", "targetId", "type"),
    ),
    Spec("save_label", "Create a label or change its color.", {"name": S, "color": _d(S, "#rrggbb")}, ("name",)),
    Spec("list_labels", "The org's labels.", read_only=True),
    Spec("save_attachment", "Attach a URL to an issue.", {"identifier": IDENT, "url": S, "title": S}, ("identifier", "url")),
    Spec("prepare_attachment_upload", "A one-time URL to PUT a file onto an issue.", {"identifier": IDENT}, ("identifier",)),
    Spec("list_attachments", "An issue's attachments.", {"identifier": IDENT}, ("identifier",), True),
    Spec("get_attachment", "One attachment.", {"attachment": _d(S, "attachment id")}, ("attachment",), True),
    Spec(
        "obsolete_attachment",
        "Mark an attachment obsolete with a reason (never deleted).",
        {"attachment": _d(S, "attachment id"), "reason": S},
        ("attachment", "reason"),
    ),
    Spec("list_members", "The org's people.", {"query": _d(S, "matches e-mail or name")}, (), True),
    Spec("suspend_member", "Owner: suspend a person and retire their keys.", {"memberId": MEMBER}, ("memberId",)),
    Spec("reactivate_member", "Owner: reactivate a suspended person.", {"memberId": MEMBER}, ("memberId",)),
    Spec("retire_member", "Owner: retire a person for good and their keys.", {"memberId": MEMBER}, ("memberId",)),
    Spec("list_connectors", "GitHub/GitLab intake connectors.", read_only=True),
    Spec("revoke_connector", "Owner: revoke a connector.", {"connectorId": S}, ("connectorId",)),
    Spec("queue_status", "Your project's queue: ready, blocked, claimed, live leases.", read_only=True),
    Spec("get_project", "A project (default: your key's) with counts by status.", {"prefix": S}, (), True),
    Spec("list_projects", "The org's projects.", read_only=True),
    Spec("usage_summary", "This month's spend by tier, key and runtime.", read_only=True),
    Spec("billing_summary", "Balance, monthly cap and billing state.", read_only=True),
)

# Old argument names still accepted (not advertised) for one release: the tools that took
# ``issue`` now take ``identifier``, as every other tool does.
ALIASES = {
    name: {"issue": "identifier"}
    for name in ("save_comment", "list_comments", "save_attachment", "prepare_attachment_upload", "list_attachments")
}


# --- one call -------------------------------------------------------------------------


def _result(payload: dict, *, error: bool = False) -> CallToolResult:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=json.loads(text), is_error=error)


def actor_from_token() -> Actor:
    """The Actor behind the bearer key this request was authenticated with.

    The transport's key check (``apps.mcp.auth``) built it at the start of this same HTTP
    request, as DRF's authentication does for an API view: the key is checked once per
    request, not once more per tool call. A token without one (the anonymous discovery
    placeholder) is checked here, and so answers UNAUTHORIZED.
    """
    token = get_access_token()
    if token is None:
        raise UNAUTHORIZED
    actor = getattr(token, "actor", None)
    if actor is not None:
        return actor
    return agent_key_authenticate(token.token)


def run_operation(spec: Spec, arguments: dict) -> CallToolResult:
    """Authenticate, check required arguments, run the operation, render. Runs in a thread.

    Counted per tool (``apps.core.metrics``): calls by outcome, time, refusals by code."""
    started = time.perf_counter()
    result = _run(spec, arguments)
    outcome = "ok"
    if result.is_error:
        code = (result.structured_content or {}).get("code", "INTERNAL")
        outcome = "error" if code == "INTERNAL" else "refused"
        if outcome == "refused":
            refusals.labels("mcp", code).inc()
    tool_calls.labels(spec.name, outcome).inc()
    tool_latency.labels(spec.name).observe(time.perf_counter() - started)
    return result


def _run(spec: Spec, arguments: dict) -> CallToolResult:
    try:
        with database_turn():
            actor = actor_from_token()
            given = {k: v for k, v in arguments.items() if v is not None}
            present = set(given) | {new for old, new in ALIASES.get(spec.name, {}).items() if given.get(old) not in (None, "")}
            missing = [name for name in spec.required if name not in present or given.get(name) == ""]
            if missing:
                raise invalid(missing[0], f"{spec.name} needs {', '.join(missing)}.")
            return _result(getattr(operations, spec.name)(actor, **given))
    except ServiceError as exc:
        return _result(exc.as_dict(), error=True)
    except OperationalError:
        log.exception("MCP tool %s: database unavailable", spec.name)
        return _result(
            ServiceError("UNAVAILABLE", "The database is busy or unavailable; try again shortly.").as_dict(), error=True
        )
    except Exception:
        log.exception("MCP tool %s failed", spec.name)
        return _result({"code": "INTERNAL", "message": "The server failed on this call; it was logged."}, error=True)


def _tool_function(spec: Spec):
    async def tool(**arguments):
        # The operation runs on the MCP threads (apps.mcp.db.in_thread): long-lived, not
        # one per call, and many at once, so calls from many agents do not queue behind
        # one another.
        return await in_thread(run_operation, spec, arguments)

    tool.__name__ = spec.name
    tool.__doc__ = spec.description
    # Every argument is optional to the SDK (required ones are checked in run_operation
    # so that a missing one answers INVALID_ARGUMENT JSON like any other refusal).
    names = [*spec.params, *ALIASES.get(spec.name, {})]
    tool.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any) for name in names]
    )
    tool.__annotations__ = {name: Any for name in names}
    return tool


class RetascTool(Tool):
    """A tool that refuses arguments it does not know (the SDK's argument model would
    silently drop them): a misspelt ``claimtoken`` must not read as "no token given"."""

    async def run(self, arguments, context, convert_result: bool = False):
        known = set(self.parameters.get("properties", {})) | set(ALIASES.get(self.name, {}))
        unknown = sorted(set(arguments or {}) - known)
        if unknown:
            refusal = unknown_argument(
                unknown[0],
                f"{self.name} has no argument {', '.join(unknown)}; its arguments are {', '.join(sorted(self.parameters.get('properties', {}))) or 'none'}.",
            )
            result = _result(refusal.as_dict(), error=True)
            return self.fn_metadata.convert_result(result) if convert_result else result
        return await super().run(arguments, context, convert_result)


def build_tools() -> list[Tool]:
    assert [s.name for s in SPECS] == list(operations.TOOLS), "one MCP tool per operation, in SPEC order"
    tools = []
    for spec in SPECS:
        tool = RetascTool.from_function(
            _tool_function(spec),
            name=spec.name,
            description=spec.description,
            structured_output=False,
            annotations=ToolAnnotations(read_only_hint=True) if spec.read_only else None,
        )
        schema: dict = {"type": "object", "properties": spec.params}
        if spec.required:
            schema["required"] = list(spec.required)
        if spec.required_any:
            schema["anyOf"] = [{"required": list(names)} for names in spec.required_any]
        tool.parameters = schema
        tools.append(tool)
    return tools
