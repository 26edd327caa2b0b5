"""OpenAPI for /api/v1/: argument and answer schemas, shared with request validation.

``ARGS`` holds the JSON schema of every tool argument (SPEC §5 names, camelCase). The
views validate request bodies against the same schemas they publish, so the document
and the behaviour cannot drift.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

_STR = {"type": "string", "maxLength": 200_000}
_SHORT = {"type": "string", "maxLength": 2000}
_IDENT = {"type": "string", "maxLength": 40, "description": "An issue identifier such as ACME-12."}
_STATUSES = ["todo", "doing", "blocked", "review", "done", "canceled"]
_STR_LIST = {"type": "array", "items": {"type": "string", "maxLength": 2000}, "maxItems": 50}
_HUMAN = {"type": ["string", "integer"], "description": "E-mail address, member id, `me` (or `none` for assignee)."}

ARGS: dict[str, dict] = {
    "label": {"type": "string", "maxLength": 120},
    "allLanes": {"type": "boolean", "description": "Also pull teammates' lanes."},
    "n": {"type": "integer", "minimum": 1, "maximum": 25},
    "claim": {"type": "boolean", "description": "true: claim all of them; false: plan-only peek."},
    "identifier": _IDENT,
    "claimToken": {"type": "string", "maxLength": 200},
    "note": {
        "oneOf": [
            _SHORT,
            {
                "type": "object",
                "properties": {k: _SHORT for k in ("done", "next", "gotchas", "branch")},
                "additionalProperties": False,
            },
        ]
    },
    "title": {"type": "string", "maxLength": 300},
    "body": _STR,
    "work": {"type": "boolean"},
    "blockedBy": {"type": "array", "items": _IDENT, "maxItems": 30},
    "noDependency": {"type": "string", "maxLength": 300},
    "status": {"type": "string", "enum": _STATUSES},
    "assignee": _HUMAN,
    "priority": {"type": "integer", "minimum": 0, "maximum": 4, "description": "0 none, 1 urgent, 2 high, 3 medium, 4 low."},
    "dueAt": {"type": ["string", "integer"], "description": "Epoch ms, ISO datetime or date; empty string clears."},
    "labels": {"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 50},
    "acceptance": {
        "type": "array",
        "items": {"oneOf": [{"type": "string", "maxLength": 2000}, {"type": "object"}]},
        "maxItems": 50,
    },
    "evidence": {"type": ["array", "object"]},
    "cancelReason": _SHORT,
    "parent": {"type": "string", "maxLength": 40, "description": "A container's identifier, or `none`."},
    "targetId": _IDENT,
    "type": {"type": "string", "enum": ["blocks", "blocked_by", "related", "duplicate"]},
    "name": {"type": "string", "maxLength": 60},
    "color": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$"},
    "url": {"type": "string", "maxLength": 2000, "format": "uri"},
    "reason": _SHORT,
}
# Query-string arguments (always strings on the wire; the services parse them).
QUERY_ARGS: dict[str, dict] = {
    "status": {"type": "string", "enum": _STATUSES},
    "priority": {"type": "integer", "minimum": 0, "maximum": 4},
    "label": {"type": "string", "maxLength": 60},
    "author": {"type": "string", "maxLength": 254},
    "assignee": {"type": "string", "maxLength": 254},
    "slaState": {"type": "string", "enum": ["ok", "warning", "breaching", "breached"]},
    "limit": {"type": "integer", "minimum": 1, "maximum": 200},
    "cursor": {"type": "string", "maxLength": 200},
    "query": {"type": "string", "maxLength": 200},
}


def body_schema(names, required=()) -> dict:
    return {
        "type": "object",
        "properties": {n: ARGS[n] for n in names},
        "required": list(required),
        "additionalProperties": False,
    }


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


_NSTR = {"type": ["string", "null"]}
_ISSUE = {
    "type": "object",
    "required": ["identifier", "title", "status", "priority", "work", "labels", "blockedBy", "blocks", "claim"],
    "properties": {
        "identifier": {"type": "string"},
        "title": {"type": "string"},
        "body": {"type": "string"},
        "status": {"type": "string", "enum": _STATUSES},
        "priority": {"type": "integer"},
        "effectivePriority": {"type": "integer"},
        "work": {"type": "boolean"},
        "assignee": _NSTR,
        "author": _NSTR,
        "labels": {"type": "array", "items": {"type": "string"}},
        "dueAt": _NSTR,
        "slaState": _NSTR,
        "timeRemainingMs": {"type": ["integer", "null"]},
        "blockedBy": {"type": "array", "items": {"type": "string"}},
        "blockedByOpen": {"type": "array", "items": {"type": "string"}},
        "blocks": {"type": "array", "items": {"type": "string"}},
        "acceptance": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "object"}]}},
        "checkpoint": _NSTR,
        "handoff": {"type": ["object", "null"]},
        "reclaimCount": {"type": "integer"},
        "createdAt": {"type": "string"},
        "updatedAt": {"type": "string"},
        "claim": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {"heldBy": _NSTR, "expiresAt": {"type": "string"}, "youHold": {"type": "boolean"}},
                },
            ]
        },
    },
}
_CLAIM = {
    "type": "object",
    "required": ["issue", "claimToken", "claimExpiresAt", "branch", "resumed"],
    "properties": {
        "issue": ref("Issue"),
        "claimToken": {"type": "string"},
        "claimExpiresAt": {"type": "string"},
        "branch": {"type": "string"},
        "resumed": {"type": "boolean"},
        "checkpoint": _NSTR,
        "checkpointBy": _NSTR,
        "reclaimCount": {"type": "integer"},
    },
}
_COMMENT = {
    "type": "object",
    "required": ["id", "issue", "body"],
    "properties": {
        "id": {"type": "string"},
        "issue": {"type": "string"},
        "author": _NSTR,
        "body": {"type": "string"},
        "retracted": {"type": "boolean"},
        "createdAt": {"type": "string"},
    },
}
_ATTACHMENT = {
    "type": "object",
    "required": ["id", "issue", "url"],
    "properties": {
        "id": {"type": "string"},
        "issue": {"type": "string"},
        "url": {"type": "string"},
        "title": _NSTR,
        "obsolete": {"type": "boolean"},
        "createdAt": {"type": "string"},
    },
}


def _list_of(key: str, item: dict) -> dict:
    return {"type": "object", "required": [key], "properties": {key: {"type": "array", "items": item}}}


COMPONENTS = {
    "Error": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "description": "A stable refusal code (SPEC §4-5)."},
            "message": {"type": "string"},
            "tellHuman": {"type": "string"},
        },
    },
    "Issue": _ISSUE,
    "Claim": _CLAIM,
    "NextIssue": {
        "type": "object",
        "description": "A claim, or an empty pull: {issue: null, ready, otherLanes, blocked, claimed, awaitingTriage}.",
        "required": ["issue"],
        "properties": {
            "issue": {"oneOf": [{"type": "null"}, ref("Issue")]},
            "claimToken": {"type": "string"},
            "ready": {"type": "integer"},
            "otherLanes": {"type": "integer"},
        },
    },
    "Batch": {
        "type": "object",
        "description": "{issues} when peeking, {claims} when claiming.",
        "properties": {"issues": {"type": "array", "items": ref("Issue")}, "claims": {"type": "array", "items": ref("Claim")}},
    },
    "IssueList": {
        "type": "object",
        "required": ["issues", "nextCursor"],
        "properties": {"issues": {"type": "array", "items": ref("Issue")}, "nextCursor": _NSTR},
    },
    "Activity": {
        "type": "object",
        "required": ["identifier", "activity"],
        "properties": {
            "identifier": {"type": "string"},
            "activity": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "seq": {"type": "integer"},
                        "verb": {"type": "string"},
                        "at": {"type": "string"},
                        "changes": {"type": "object"},
                        "hash": {"type": "string"},
                    },
                },
            },
        },
    },
    "Comment": _COMMENT,
    "CommentList": _list_of("comments", ref("Comment")),
    "Attachment": _ATTACHMENT,
    "AttachmentList": _list_of("attachments", ref("Attachment")),
    "Upload": {
        "type": "object",
        "required": ["uploadUrl", "expiresAt"],
        "properties": {
            "uploadUrl": {"type": "string"},
            "expiresAt": {"type": "string"},
            "attachmentId": {"type": "string"},
            "method": {"type": "string"},
            "maxBytes": {"type": "integer"},
        },
    },
    "Relation": {
        "type": "object",
        "properties": {"source": {"type": "string"}, "target": {"type": "string"}, "type": {"type": "string"}},
    },
    "Label": {
        "type": "object",
        "required": ["name", "color"],
        "properties": {"name": {"type": "string"}, "color": {"type": "string"}},
    },
    "LabelList": _list_of("labels", ref("Label")),
    "Member": {
        "type": "object",
        "required": ["memberId", "email"],
        "properties": {
            "memberId": {"type": "integer"},
            "email": {"type": "string"},
            "role": {"type": "string"},
            "status": {"type": "string"},
        },
    },
    "MemberList": _list_of("members", ref("Member")),
    "MemberStatus": {
        "type": "object",
        "required": ["memberId", "status"],
        "properties": {
            "memberId": {"type": "integer"},
            "email": {"type": "string"},
            "status": {"type": "string"},
            "keysRetired": {"type": "integer"},
        },
    },
    "Project": {
        "type": "object",
        "required": ["prefix", "name"],
        "properties": {"prefix": {"type": "string"}, "name": {"type": "string"}},
    },
    "ProjectList": _list_of("projects", ref("Project")),
    "ConnectorList": _list_of("connectors", {"type": "object"}),
    "SessionKey": {
        "type": "object",
        "required": ["agentKey", "label"],
        "properties": {"agentKey": {"type": "string"}, "label": {"type": "string"}, "prefix": {"type": "string"}},
    },
    "Whoami": {
        "type": "object",
        "required": ["principal", "runtime", "org"],
        "properties": {
            "principal": {"type": "object"},
            "runtime": {"type": "string"},
            "key": {"type": ["object", "null"]},
            "org": {"type": "object"},
            "project": {"type": ["object", "null"]},
        },
    },
    "Object": {"type": "object"},
}


def only_api_v1(endpoints, **kwargs):
    """Preprocessing hook: the document covers /api/v1/ only (not the schema view itself)."""
    return [e for e in endpoints if e[0].startswith("/api/v1/")]


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.auth.BearerKeyAuthentication"
    name = "agentKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An agent key (rtsc_…)."}


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.auth.SessionOrgAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": "sessionid",
            "description": "A signed-in session (writes need the CSRF token). `X-Retasc-Org` picks the org.",
        }


def add_components(result, generator, request, public):
    """Postprocessing hook: the answer shapes referenced by the views' raw schemas."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result


class PersonalTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.devices.auth.PersonalTokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal token (rtscpat_…): the CLI acting as its human."}
