"""GET /api/v1/export?format=json|csv: the org export, streamed (owner-only)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from rest_framework.views import APIView

from apps.api.auth import BearerKeyAuthentication, HasActor, KeyRateThrottle, SessionOrgAuthentication
from apps.api.views import FirstRenderer
from apps.devices.auth import PersonalTokenAuthentication
from apps.intake.services import org_export


def _stream(chunks):
    """Hand a sync iterator to Daphne chunk by chunk. Django serves a sync iterator under
    ASGI by reading it whole into memory first; this async wrapper keeps memory flat. The
    ORM runs in Django's sync thread (thread_sensitive), like every sync view."""
    pull = sync_to_async(lambda: next(chunks, None), thread_sensitive=True)

    async def agen():
        while (chunk := await pull()) is not None:
            yield chunk.encode()

    return agen()


class Export(APIView):
    schema = None
    content_negotiation_class = FirstRenderer
    authentication_classes = [PersonalTokenAuthentication, BearerKeyAuthentication, SessionOrgAuthentication]
    permission_classes = [HasActor]
    throttle_classes = [KeyRateThrottle]

    def get(self, request):
        export = org_export(actor=request.auth, format=request.query_params.get("format", "json"))
        chunks = iter(export.chunks)
        # Under ASGI (Daphne) stream through an async iterator; under WSGI a sync one streams as is.
        body = _stream(chunks) if isinstance(request._request, ASGIRequest) else (c.encode() for c in chunks)
        response = StreamingHttpResponse(body, content_type=export.content_type)
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        response["Cache-Control"] = "private, no-store"
        response["X-Content-Type-Options"] = "nosniff"
        return response
