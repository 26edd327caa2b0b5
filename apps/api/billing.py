"""/api/v1/billing/...: the owner's billing beyond ``GET /api/v1/billing`` (the summary,
the same as the ``billing_summary`` tool): the monthly cap, the ledger (a page, or all of
it as streamed CSV) and card top-ups. Behind the Dash's billing page and ``retasc billing``.

Each view parses its input, calls one service or selector, renders JSON; refusals are the
API's ``{code, message, ...}``. An agent key whose person is an owner may use them like
the owner's CLI token; reads are metered like every agent read. Kept out of the OpenAPI
document, like the export (``schema = None``).
"""

from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.auth import BearerKeyAuthentication, HasActor, KeyRateThrottle, SessionOrgAuthentication
from apps.api.export import _stream
from apps.api.parsers import body_fields
from apps.api.views import FirstRenderer
from apps.billing import selectors, services
from apps.core.errors import invalid
from apps.core.unit import metered_read
from apps.devices.auth import PersonalTokenAuthentication


class BillingView(APIView):
    schema = None
    content_negotiation_class = FirstRenderer
    authentication_classes = [PersonalTokenAuthentication, BearerKeyAuthentication, SessionOrgAuthentication]
    permission_classes = [HasActor]
    throttle_classes = [KeyRateThrottle]


def _filters(request) -> dict:
    return {name: request.query_params.get(name) for name in ("key", "runtime", "tier")}


class Cap(BillingView):
    """PUT {"capMicros": <int> | null}: set or clear the monthly cap (owners; a receipt)."""

    def put(self, request):
        data = body_fields(request.data, ("capMicros",))
        if "capMicros" not in data:
            raise invalid("capMicros", "capMicros is required: micro-dollars, or null to clear the cap.")
        return Response(services.billing_cap_set(actor=request.auth, cap_micros=data["capMicros"]))

    post = put


class Ledger(BillingView):
    """GET ?key=&runtime=&tier=&cursor=&limit=: one page of the ledger, newest first."""

    def get(self, request):
        answer = selectors.ledger_page(
            actor=request.auth,
            **_filters(request),
            cursor=request.query_params.get("cursor"),
            limit=request.query_params.get("limit"),
        )
        metered_read(request.auth, "billing_ledger")
        return Response(answer)


def ledger_csv_response(request, actor, filters: dict) -> StreamingHttpResponse:
    """The filtered ledger as a streamed CSV download (the Dash's link uses it too)."""
    chunks = iter(selectors.ledger_csv(actor=actor, **filters))
    body = _stream(chunks) if isinstance(request, ASGIRequest) else (c.encode() for c in chunks)
    response = StreamingHttpResponse(body, content_type="text/csv; charset=utf-8")
    filename = f"retasc-ledger-{actor.org.slug}-{timezone.now():%Y%m%d}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "private, no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


class LedgerCsv(BillingView):
    def get(self, request):
        response = ledger_csv_response(request._request, request.auth, _filters(request))
        metered_read(request.auth, "billing_ledger_csv")
        return response


class Topups(BillingView):
    """POST {"amount": 10 | 25 | 50 | 100}: start a Stripe Checkout; answers {sessionId, url}."""

    def post(self, request):
        data = body_fields(request.data, ("amount",))
        answer = services.topup_checkout(actor=request.auth, amount_dollars=data.get("amount"))
        return Response(answer, status=201)
