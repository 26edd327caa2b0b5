"""Inbound webhook endpoints: ``POST /hooks/github/<connectorId>`` and
``POST /hooks/gitlab/<connectorId>`` (SPEC §9).

Thin: cap the body before reading it (the declared ``Content-Length`` first, then the
bytes actually read), hand the raw body and headers to ``apps.intake.inbound``, and
answer JSON: 202 accepted, 200 for a delivery already seen, 401 / 404 / 410 / 413 as
``{code, message}``. No session, no CSRF: the signature is the credential.
"""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from apps.core.errors import ServiceError
from apps.intake.inbound import delivery_receive
from apps.intake.models import Provider

_READ_CHUNK = 64 * 1024


def _too_large(limit: int) -> JsonResponse:
    return JsonResponse({"code": "TOO_LARGE", "message": f"A delivery may be at most {limit} bytes."}, status=413)


def _read_capped(request, limit: int) -> bytes | None:
    """The body, or None once more than ``limit`` bytes have been read."""
    chunks, size = [], 0
    while True:
        chunk = request.read(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def _hook(provider: str):
    @csrf_exempt
    def view(request, connector_id: str):
        if request.method != "POST":
            return JsonResponse({"code": "METHOD_NOT_ALLOWED", "message": "Deliveries are POSTed."}, status=405)
        limit = settings.RETASC_HOOK_MAX_BODY_BYTES
        declared = request.META.get("CONTENT_LENGTH") or ""
        if declared.isdigit() and int(declared) > limit:
            return _too_large(limit)
        body = _read_capped(request, limit)
        if body is None:
            return _too_large(limit)
        headers = {name.lower(): value for name, value in request.headers.items()}
        try:
            received = delivery_receive(provider=provider, connector_id=connector_id, headers=headers, body=body)
        except ServiceError as exc:
            return JsonResponse(exc.as_dict(), status=exc.http_status)
        return JsonResponse(received.as_dict(), status=200 if received.duplicate else 202)

    view.__name__ = f"{provider}_hook"
    return view


github_hook = _hook(Provider.GITHUB)
gitlab_hook = _hook(Provider.GITLAB)
