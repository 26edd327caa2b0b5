"""Every refusal of the HTTP API is JSON ``{code, message, ...details}`` (SPEC §15).

Service refusals (``ServiceError``) keep their code and HTTP status; DRF's own errors
(parse, auth, 404, 405, throttling) are given a code in the same style.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from apps.core import metrics
from apps.core.errors import ServiceError

UNAUTHORIZED_MESSAGE = "Missing, unknown or revoked agent key."

_CODES = {
    exceptions.ParseError: ("INVALID_ARGUMENT", "The request body is not valid JSON."),
    exceptions.NotAuthenticated: ("UNAUTHORIZED", UNAUTHORIZED_MESSAGE),
    exceptions.AuthenticationFailed: ("UNAUTHORIZED", UNAUTHORIZED_MESSAGE),
    exceptions.NotFound: ("NOT_FOUND", "No such resource."),
    exceptions.MethodNotAllowed: ("METHOD_NOT_ALLOWED", None),
    exceptions.NotAcceptable: ("NOT_ACCEPTABLE", "This endpoint answers application/json."),
    exceptions.UnsupportedMediaType: ("UNSUPPORTED_MEDIA_TYPE", "Send application/json."),
    exceptions.PermissionDenied: ("FORBIDDEN", None),
}


log = logging.getLogger(__name__)


def refusal_body(exc: ServiceError) -> dict:
    body = exc.as_dict()
    if exc.code == "CLAIM_MISMATCH":
        body.setdefault("reason", "holder-only-writes")
    return body


def exception_handler(exc, context):
    response = _render(exc)
    if response is not None and isinstance(response.data, dict) and "code" in response.data:
        metrics.refusals.labels("api", response.data["code"]).inc()
    return response


def _render(exc):
    if isinstance(exc, ServiceError):
        return Response(refusal_body(exc), status=exc.http_status)
    if isinstance(exc, (OperationalError, InterfaceError)):
        # The database is unreachable or out of connections: a retryable refusal in the
        # same JSON as every other (MCP answers UNAVAILABLE too), never an HTML 500.
        log.warning("database unavailable: %s", type(exc).__name__)
        return Response(
            {"code": "UNAVAILABLE", "message": "The database is unavailable; retry shortly.", "retryable": True},
            status=503,
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: let Django answer 500 and log it
    headers = {}
    if isinstance(exc, exceptions.Throttled):
        wait = max(1, int(exc.wait or 1))
        headers["Retry-After"] = str(wait)
        body = {
            "code": "RATE_LIMITED",
            "message": f"Too many requests for this key; retry in {wait} s.",
            "retryAfterSeconds": wait,
        }
    elif isinstance(exc, exceptions.ValidationError):
        body = {"code": "INVALID_ARGUMENT", "message": "The request is not valid.", "errors": exc.detail}
    else:
        code, message = next(((c, m) for cls, (c, m) in _CODES.items() if isinstance(exc, cls)), (None, None))
        body = {
            "code": code or str(exc.default_code).upper(),
            "message": message or str(exc.detail),
        }
        if isinstance(exc, exceptions.PermissionDenied) and "CSRF" in str(exc.detail):
            body["reason"] = "csrf"
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        headers["WWW-Authenticate"] = 'Bearer realm="retasc"'
        return Response(body, status=401, headers=headers)
    return Response(body, status=exc.status_code, headers=headers)


def api_not_found(request, *args, **kwargs):
    """Unknown paths under /api/ answer JSON, like every other refusal of the API."""
    return JsonResponse({"code": "NOT_FOUND", "message": f"No API endpoint at {request.path}."}, status=404)
