"""``POST /hooks/stripe``: Stripe's webhook for card top-ups and refunds (SPEC §11).

Parses and verifies, then calls one service. The ``Stripe-Signature`` header is checked
against ``RETASC_STRIPE_WEBHOOK_SECRET`` over the raw body before anything is parsed;
``apps.billing.services.stripe_event_apply`` credits at most once per event id. Answers
JSON: 200 for an event applied, repeated or ignored (Stripe stops retrying), 400 for a
body that is not an event, 401 for a bad signature, 404 when the endpoint is not
configured or a refund names no top-up yet (Stripe retries later).
"""

from __future__ import annotations

import json

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.billing import stripe_api
from apps.billing.services import stripe_event_apply
from apps.core.errors import ServiceError, invalid

MAX_EVENT_BYTES = 512 * 1024  # Stripe events are a few kilobytes


def _refusal(exc: ServiceError) -> JsonResponse:
    return JsonResponse(exc.as_dict(), status=exc.http_status)


@csrf_exempt
@require_POST
def webhook(request):
    if not stripe_api.webhook_enabled():
        return _refusal(ServiceError("NOT_FOUND", "Stripe webhooks are not configured on this server."))
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > MAX_EVENT_BYTES:
        return _refusal(ServiceError("TOO_LARGE", f"A Stripe event may be at most {MAX_EVENT_BYTES} bytes."))
    payload = request.read(MAX_EVENT_BYTES + 1)
    if len(payload) > MAX_EVENT_BYTES:
        return _refusal(ServiceError("TOO_LARGE", f"A Stripe event may be at most {MAX_EVENT_BYTES} bytes."))
    try:
        stripe_api.signature_verify(
            payload=payload,
            header=request.headers.get("Stripe-Signature", ""),
            secret=settings.RETASC_STRIPE_WEBHOOK_SECRET,
        )
        try:
            event = json.loads(payload)
        except ValueError:
            raise invalid("body", "The body is not JSON.") from None
        answer = stripe_event_apply(event=event)
    except ServiceError as exc:
        return _refusal(exc)
    return JsonResponse(answer, status=200)
