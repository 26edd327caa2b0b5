"""Imports and placeholder people (SPEC §9): thin views over apps.intake.imports.

- ``POST /api/v1/imports``: JSON ``{source: "linear", apiKey, teams?}`` or a multipart
  upload (``source`` = ``retasc`` | ``beads``, ``file``); 202 ``{importId, status}``.
- ``GET /api/v1/imports`` and ``GET /api/v1/imports/{importId}``: the job's shape.
- ``POST /api/v1/members/{memberId}/claim`` and ``.../merge {into}``: the surviving
  member's shape.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from apps.api.parsers import BoundedJSONParser, body_fields
from apps.api.schema import ref
from apps.api.views import ApiView
from apps.intake.imports import people
from apps.intake.imports.services import import_get, import_list, import_shape, import_start
from apps.orgs.selectors import member_shape

_ERRORS = {code: ref("Error") for code in (400, 403, 404, 409)}
_JSON_FIELDS = ("source", "apiKey", "teams")
_FORM_FIELDS = ("source", "file")


class Imports(ApiView):
    parser_classes = [BoundedJSONParser, MultiPartParser, FormParser]

    @extend_schema(
        operation_id="list_imports",
        summary="The org's imports, newest first (owner).",
        tags=["imports"],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        return Response({"imports": [import_shape(job) for job in import_list(actor=request.auth)]})

    @extend_schema(
        operation_id="start_import",
        summary="Start an import (owner): Linear (JSON with apiKey) or a file (multipart: source, file).",
        tags=["imports"],
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request):
        upload = request.FILES.get("file") if hasattr(request, "FILES") else None
        data = request.data
        if upload is not None or request.content_type.startswith(("multipart/", "application/x-www-form-urlencoded")):
            body_fields(data, _FORM_FIELDS)
            job = import_start(
                actor=request.auth,
                source=data.get("source"),
                upload=upload.read() if upload is not None else None,
                filename=getattr(upload, "name", None),
            )
        else:
            body_fields(data, _JSON_FIELDS)
            job = import_start(actor=request.auth, source=data.get("source"), api_key=data.get("apiKey"), teams=data.get("teams"))
        job.refresh_from_db(fields=["status"])
        return Response({"importId": str(job.pk), "status": job.status}, status=202)


class ImportDetail(ApiView):
    @extend_schema(
        operation_id="get_import",
        summary="One import's status, counts, errors and summary (owner).",
        tags=["imports"],
        responses={200: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def get(self, request, import_id):
        return Response(import_shape(import_get(actor=request.auth, import_id=import_id)))


class MemberClaim(ApiView):
    @extend_schema(
        operation_id="claim_placeholder",
        summary="Claim a placeholder person as yourself.",
        tags=["members"],
        request=None,
        responses={200: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request, member_id):
        membership = people.placeholder_claim(actor=request.auth, placeholder=member_id)
        return Response(member_shape(membership))


class MemberMerge(ApiView):
    @extend_schema(
        operation_id="merge_placeholder",
        summary="Merge a placeholder person into a member (owner).",
        tags=["members"],
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request, member_id):
        data = body_fields(request.data, ("into",))
        membership = people.placeholder_merge(actor=request.auth, placeholder=member_id, into=data.get("into"))
        return Response(member_shape(membership))
