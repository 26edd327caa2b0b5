"""The HTTP API: each endpoint parses its input, calls one ``apps.tools.operations``
function (the same one the MCP tool calls) and renders its JSON answer.

Routes are declared in ``ROUTES`` (path -> method -> ``Op``); ``build_view`` turns each
into a DRF view with its OpenAPI description.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import jsonschema
from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.auth import BearerKeyAuthentication, HasActor, KeyRateThrottle, SessionOrgAuthentication
from apps.api.parsers import body_fields
from apps.api.schema import ARGS, QUERY_ARGS, body_schema, ref
from apps.billing import usage
from apps.core.errors import ServiceError, invalid
from apps.devices.auth import PersonalTokenAuthentication
from apps.issues.selectors import attachment_file
from apps.issues.services import attachment_upload_store
from apps.issues.shapes import attachment_shape
from apps.tools import operations


class FirstRenderer(BaseContentNegotiation):
    """The API answers JSON whatever the Accept header says (files are plain responses)."""

    def select_parser(self, request, parsers):
        return next((p for p in parsers if p.media_type == request.content_type.split(";")[0].strip()), None)

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ApiView(APIView):
    # PersonalTokenAuthentication (rtscpat_…, the CLI acting as its human) answers None for
    # any other bearer, so agent keys are judged by BearerKeyAuthentication as before.
    authentication_classes = [PersonalTokenAuthentication, BearerKeyAuthentication, SessionOrgAuthentication]
    permission_classes = [HasActor]
    throttle_classes = [KeyRateThrottle]
    content_negotiation_class = FirstRenderer


@dataclass(frozen=True)
class Op:
    tool: str  # the apps.tools.operations function (= the MCP tool)
    operation_id: str
    summary: str
    path: dict = field(default_factory=dict)  # URL kwarg -> tool argument
    body: tuple = ()  # tool arguments read from the JSON body
    required: tuple = ()
    query: tuple = ()  # tool arguments read from the query string
    status: int = 200
    response: str = "Object"


def _json_body(request, op: Op) -> dict:
    length = request.META.get("CONTENT_LENGTH") or "0"
    limit = settings.RETASC_MAX_BODY_BYTES  # also capped before the app reads it (apps.core.bodycap)
    if length.isdigit() and int(length) > limit:
        raise ServiceError("TOO_LARGE", f"A request body may be at most {limit} bytes.", maxBytes=limit)
    data = request.data
    if data is None or data == {}:
        data = {}
    body_fields(data, op.body)
    for name in op.required:
        if data.get(name) is None:
            raise invalid(name, f"{name} is required.")
    args = {k: v for k, v in data.items() if v is not None}  # null means "not given" (operations module doc)
    for name, value in args.items():
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(ARGS[name]).iter_errors(value))
        if error is not None:
            raise invalid(name, schema_message(name, error))
    return args


def schema_message(name: str, error) -> str:
    """One short sentence for a schema refusal, never the value itself (a 900 KB body
    came back whole in a 921,620-character message). Limits are worded as MCP words them
    (apps.issues.inputs), so both interfaces say the same thing."""
    nested = bool(error.path)
    limit = error.validator_value
    if error.validator == "maxLength":
        if nested:
            return f"an entry of {name} is longer than {limit} characters."
        return f"{name} is longer than {limit} characters."
    if error.validator == "maxItems":
        return f"{name} has more than {limit} entries."
    if error.validator == "type":
        kinds = " or ".join(limit) if isinstance(limit, list) else limit
        where = f"every entry of {name}" if nested else name
        return f"{where} must be of type {kinds}."
    if error.validator == "enum":
        return f"{name} must be one of {', '.join(str(v) for v in limit)}."
    if len(repr(error.instance)) <= 80:
        return f"{name}: {error.message}"
    return f"{name} is not valid ({error.validator} {limit})."[:300]


def _query(request, op: Op) -> dict:
    args = {}
    for name in op.query:
        values = [v for v in request.query_params.getlist(name) if v != ""]
        if values:
            args[name] = values[0] if len(values) == 1 else values
    return args


ERROR_STATUSES = (400, 401, 402, 403, 404, 409, 413, 422, 429)
_PATH_EXAMPLES = {"identifier": "ACME-1", "target": "ACME-2", "type": "blocks", "prefix": "ACME", "member": "me"}


def _examples(kwarg: str) -> list:
    value = _PATH_EXAMPLES.get(kwarg)
    return [OpenApiExample(kwarg, value=value)] if value else []


def _handler(op: Op, tag: str):
    def handle(self, request, **kwargs):
        args = {arg: kwargs[kwarg] for kwarg, arg in op.path.items()}
        if op.query:
            args.update(_query(request, op))
        if op.body or request.method in ("POST", "PATCH", "PUT"):
            args.update(_json_body(request, op))
        answer = getattr(operations, op.tool)(request.auth, **args)
        return Response(answer, status=op.status)

    errors = {code: OpenApiResponse(ref("Error"), description="A refusal {code, message, ...}.") for code in ERROR_STATUSES}
    parameters = [
        OpenApiParameter(kwarg, OpenApiTypes.STR, OpenApiParameter.PATH, examples=_examples(kwarg)) for kwarg in op.path
    ]
    parameters += [OpenApiParameter(name, QUERY_ARGS[name], OpenApiParameter.QUERY, required=False) for name in op.query]
    request_schema = {"application/json": body_schema(op.body, op.required)} if op.body else None
    return extend_schema(
        operation_id=op.operation_id,
        summary=op.summary,
        parameters=parameters,
        request=request_schema,
        responses={op.status: ref(op.response), **errors},
        tags=[tag],
    )(handle)


def build_view(name: str, route: str, methods: dict[str, Op]) -> type[ApiView]:
    tag = route.split("/")[0]
    attrs = {method: _handler(op, tag) for method, op in methods.items()}
    attrs["__doc__"] = " / ".join(op.summary for op in methods.values())
    return type(name, (ApiView,), attrs)


_ID = {"identifier": "identifier"}
_ISSUE = {"identifier": "identifier"}
_SAVE = (
    "title",
    "body",
    "work",
    "blockedBy",
    "noDependency",
    "status",
    "assignee",
    "priority",
    "dueAt",
    "labels",
    "acceptance",
    "evidence",
    "cancelReason",
    "parent",
)

ROUTES: dict[str, tuple[str, dict[str, Op]]] = {
    "whoami": ("Whoami", {"get": Op("whoami", "whoami", "Who am I: principal, runtime, key, org, project.", response="Whoami")}),
    "session-keys": (
        "SessionKeys",
        {
            "post": Op(
                "mint_session_key",
                "mint_session_key",
                "Mint a per-session child key.",
                body=("label",),
                status=201,
                response="SessionKey",
            )
        },
    ),
    "work/next": (
        "WorkNext",
        {
            "post": Op(
                "next_issue", "next_issue", "Claim the next ready issue in your lane.", body=("allLanes",), response="NextIssue"
            )
        },
    ),
    "work/batch": (
        "WorkBatch",
        {
            "post": Op(
                "next_batch",
                "next_batch",
                "Peek at (or claim) up to n independent ready issues.",
                body=("n", "claim", "allLanes"),
                response="Batch",
            )
        },
    ),
    "queue": ("Queue", {"get": Op("queue_status", "queue_status", "Queue counts and live leases.")}),
    "issues": (
        "Issues",
        {
            "get": Op(
                "list_issues",
                "list_issues",
                "List issues, newest first (cursor-paginated).",
                query=("query", "status", "priority", "label", "author", "assignee", "slaState", "limit", "cursor"),
                response="IssueList",
            ),
            "post": Op(
                "save_issue",
                "create_issue",
                "Create an issue.",
                body=_SAVE,
                required=("title", "work"),
                status=201,
                response="Issue",
            ),
        },
    ),
    "issues/<str:identifier>": (
        "IssueDetail",
        {
            "get": Op("get_issue", "get_issue", "Read one issue.", path=_ID, response="Issue"),
            "patch": Op(
                "save_issue",
                "update_issue",
                "Edit an issue (only the fields given).",
                path=_ID,
                body=(*_SAVE, "claimToken"),
                response="Issue",
            ),
        },
    ),
    "issues/<str:identifier>/triage": (
        "IssueTriage",
        {
            "post": Op(
                "triage_issue",
                "triage_issue",
                "A person signs off (or rejects) an issue awaiting triage; agent keys are refused.",
                path=_ID,
                body=("accept", "reason"),
                required=("accept",),
                response="Issue",
            )
        },
    ),
    "issues/<str:identifier>/activity": (
        "IssueActivity",
        {"get": Op("get_activity", "get_activity", "The issue's receipts.", path=_ID, response="Activity")},
    ),
    "issues/<str:identifier>/claim": (
        "IssueClaim",
        {
            "get": Op("check_claim", "check_claim", "Is my claim on this issue still live?", path=_ID),
            "post": Op(
                "claim_issue",
                "claim_issue",
                "Claim this issue (or rebind your live token).",
                path=_ID,
                body=("claimToken",),
                response="Claim",
            ),
        },
    ),
    "issues/<str:identifier>/heartbeat": (
        "IssueHeartbeat",
        {"post": Op("heartbeat", "heartbeat", "Renew the lease.", path=_ID, body=("claimToken",), required=("claimToken",))},
    ),
    "issues/<str:identifier>/checkpoint": (
        "IssueCheckpoint",
        {
            "post": Op(
                "checkpoint",
                "checkpoint",
                "Write a handoff note (renews the lease).",
                path=_ID,
                body=("note", "claimToken"),
                required=("note", "claimToken"),
            )
        },
    ),
    "issues/<str:identifier>/release": (
        "IssueRelease",
        {
            "post": Op(
                "release_issue",
                "release_issue",
                "Release the claim.",
                path=_ID,
                body=("claimToken", "note"),
                required=("claimToken",),
            )
        },
    ),
    "issues/<str:identifier>/comments": (
        "IssueComments",
        {
            "get": Op("list_comments", "list_comments", "The issue's comments.", path=_ISSUE, response="CommentList"),
            "post": Op(
                "save_comment",
                "save_comment",
                "Comment on the issue.",
                path=_ISSUE,
                body=("body",),
                required=("body",),
                status=201,
                response="Comment",
            ),
        },
    ),
    "comments/<str:comment>/retract": (
        "CommentRetract",
        {
            "post": Op(
                "retract_comment",
                "retract_comment",
                "Strike a comment through with a reason.",
                path={"comment": "comment"},
                body=("note",),
                required=("note",),
                response="Comment",
            )
        },
    ),
    "issues/<str:identifier>/relations": (
        "IssueRelations",
        {
            "post": Op(
                "add_relation",
                "add_relation",
                "Add a relation from this issue.",
                path={"identifier": "sourceId"},
                body=("targetId", "type"),
                required=("targetId", "type"),
                response="Relation",
            )
        },
    ),
    "issues/<str:identifier>/relations/<str:type>/<str:target>": (
        "IssueRelationDetail",
        {
            "delete": Op(
                "remove_relation",
                "remove_relation",
                "Remove a relation from this issue.",
                path={"identifier": "sourceId", "type": "type", "target": "targetId"},
                response="Relation",
            )
        },
    ),
    "issues/<str:identifier>/attachments": (
        "IssueAttachments",
        {
            "get": Op("list_attachments", "list_attachments", "The issue's attachments.", path=_ISSUE, response="AttachmentList"),
            "post": Op(
                "save_attachment",
                "save_attachment",
                "Attach a URL.",
                path=_ISSUE,
                body=("url", "title"),
                required=("url",),
                status=201,
                response="Attachment",
            ),
        },
    ),
    "issues/<str:identifier>/attachments/upload": (
        "IssueAttachmentUpload",
        {
            "post": Op(
                "prepare_attachment_upload",
                "prepare_attachment_upload",
                "A one-time URL to PUT a file to.",
                path=_ISSUE,
                response="Upload",
            )
        },
    ),
    "attachments/<str:attachment>": (
        "AttachmentDetail",
        {
            "get": Op(
                "get_attachment",
                "get_attachment",
                "Read one attachment.",
                path={"attachment": "attachment"},
                response="Attachment",
            )
        },
    ),
    "attachments/<str:attachment>/obsolete": (
        "AttachmentObsolete",
        {
            "post": Op(
                "obsolete_attachment",
                "obsolete_attachment",
                "Mark an attachment obsolete.",
                path={"attachment": "attachment"},
                body=("reason",),
                required=("reason",),
                response="Attachment",
            )
        },
    ),
    "labels": (
        "Labels",
        {
            "get": Op("list_labels", "list_labels", "The org's labels.", response="LabelList"),
            "post": Op(
                "save_label",
                "save_label",
                "Create or recolor a label.",
                body=("name", "color"),
                required=("name",),
                response="Label",
            ),
        },
    ),
    "projects": ("Projects", {"get": Op("list_projects", "list_projects", "The org's projects.", response="ProjectList")}),
    "projects/<str:prefix>": (
        "ProjectDetail",
        {"get": Op("get_project", "get_project", "One project with its counts.", path={"prefix": "prefix"}, response="Project")},
    ),
    "members": (
        "Members",
        {"get": Op("list_members", "list_members", "The org's members.", query=("query",), response="MemberList")},
    ),
    "members/<str:member>/suspend": (
        "MemberSuspend",
        {
            "post": Op(
                "suspend_member",
                "suspend_member",
                "Suspend a member (retires their keys).",
                path={"member": "memberId"},
                response="MemberStatus",
            )
        },
    ),
    "members/<str:member>/reactivate": (
        "MemberReactivate",
        {
            "post": Op(
                "reactivate_member",
                "reactivate_member",
                "Reactivate a member.",
                path={"member": "memberId"},
                response="MemberStatus",
            )
        },
    ),
    "members/<str:member>/retire": (
        "MemberRetire",
        {
            "post": Op(
                "retire_member",
                "retire_member",
                "Retire a member for good (retires their keys).",
                path={"member": "memberId"},
                response="MemberStatus",
            )
        },
    ),
    "connectors": (
        "Connectors",
        {
            "get": Op("list_connectors", "list_connectors", "Intake connectors.", response="ConnectorList"),
            "post": Op(
                "add_connector",
                "add_connector",
                "Owner: connect a GitHub/GitLab repository to a project (the secret is shown once).",
                body=("provider", "project", "repo", "token", "apiUrl", "prSync"),
                required=("provider", "project", "repo"),
                status=201,
                response="ConnectorCreated",
            ),
        },
    ),
    "connectors/<str:connector>": (
        "ConnectorDetail",
        {
            "get": Op(
                "get_connector",
                "get_connector",
                "A connector with its delivery log and writebacks.",
                path={"connector": "connectorId"},
            )
        },
    ),
    "connectors/<str:connector>/revoke": (
        "ConnectorRevoke",
        {"post": Op("revoke_connector", "revoke_connector", "Revoke a connector.", path={"connector": "connectorId"})},
    ),
    "usage": ("Usage", {"get": Op("usage_summary", "usage_summary", "Metered usage.")}),
    "billing": ("Billing", {"get": Op("billing_summary", "billing_summary", "Balance, caps and recent charges.")}),
}


# --- files ----------------------------------------------------------------------------


class AttachmentFile(ApiView):
    """Download an uploaded attachment's file (decrypted), for members of its org."""

    @extend_schema(
        operation_id="download_attachment",
        summary="Download an uploaded file.",
        tags=["attachments"],
        parameters=[OpenApiParameter("attachment", OpenApiTypes.STR, OpenApiParameter.PATH)],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, 401: ref("Error"), 404: ref("Error")},
    )
    def get(self, request, attachment):
        att = attachment_file(actor=request.auth, attachment=attachment)
        response = HttpResponse(att.file, content_type=att.content_type or "application/octet-stream")
        # Quotes, backslashes and control characters out: a carriage return stored by an
        # older release made this header (and so the download) fail for good.
        filename = re.sub(r'["\\\x00-\x1f\x7f]', "", att.title or "") or str(att.pk)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        response["X-Content-Type-Options"] = "nosniff"
        response["Cache-Control"] = "private, no-store"
        return response


class Upload(APIView):
    """PUT the raw bytes of a file to the one-time URL from prepare_attachment_upload.

    The signed URL is the credential (like a presigned object-store URL): no key, no
    session, no CSRF. ``?filename=`` names the file.
    """

    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    throttle_classes = []
    content_negotiation_class = FirstRenderer

    @extend_schema(
        operation_id="upload_attachment_file",
        summary="Upload a file to a one-time URL.",
        tags=["uploads"],
        auth=[],
        parameters=[
            OpenApiParameter("token", OpenApiTypes.STR, OpenApiParameter.PATH),
            OpenApiParameter("filename", OpenApiTypes.STR, OpenApiParameter.QUERY, required=False),
        ],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={201: ref("Attachment"), 401: ref("Error"), 409: ref("Error"), 413: ref("Error")},
    )
    def put(self, request, token):
        limit = settings.RETASC_UPLOAD_MAX_BYTES
        length = request.META.get("CONTENT_LENGTH") or ""
        if length.isdigit() and int(length) > limit:
            raise ServiceError("TOO_LARGE", f"A file may be at most {limit} bytes.", maxBytes=limit)
        content = request._request.read(limit + 1)  # not .body: DATA_UPLOAD_MAX_MEMORY_SIZE is for forms
        att = attachment_upload_store(
            token=token,
            content=content,
            content_type=request.content_type or "",
            filename=request.query_params.get("filename", ""),
        )
        return Response(attachment_shape(att), status=201)


class UsagePush(ApiView):
    """``POST /api/v1/usage/reports``: a runtime's per-day token and session totals for this key."""

    @extend_schema(
        operation_id="usage_push",
        summary="Report a runtime's usage per day (counts only; each day replaces the last report).",
        tags=["usage"],
        request={
            "application/json": {
                "type": "object",
                "required": ["runtime", "days"],
                "additionalProperties": False,
                "properties": {
                    "runtime": {"type": "string", "maxLength": 40},
                    "days": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["day"],
                            "additionalProperties": False,
                            "properties": {
                                "day": {"type": "string", "format": "date"},
                                "model": {"type": "string", "maxLength": 100},
                                **{n: {"type": "integer", "minimum": 0} for n in usage.COUNTERS},
                            },
                        },
                    },
                },
            }
        },
        responses={200: OpenApiTypes.OBJECT, 400: ref("Error"), 401: ref("Error"), 403: ref("Error")},
    )
    def post(self, request):
        body = body_fields(request.data, ("runtime", "days"))
        return Response(usage.usage_report(actor=request.auth, runtime=body.get("runtime"), days=body.get("days")))
