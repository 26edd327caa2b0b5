"""The owner's billing page: balance, spend against the cap, charts, the ledger (filtered,
paginated, CSV), the cap form and card top-ups. Owners only (the selectors and services
refuse anyone else with ``FORBIDDEN``)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from apps.api.billing import ledger_csv_response
from apps.billing import selectors, services
from apps.core.errors import ServiceError, invalid
from apps.dash import charts
from apps.dash.context import dash_view
from apps.dash.views.common import field

FILTERS = ("key", "runtime", "tier")


def _filters(request) -> dict:
    return {name: request.GET.get(name) or None for name in FILTERS}


def _context(request, *, filters: dict | None = None, cursor=None) -> dict:
    actor = request.actor
    overview = selectors.billing_overview(actor=actor)
    filters = filters if filters is not None else {}
    ledger = selectors.ledger_page(actor=actor, **filters, cursor=cursor)
    query = urlencode({k: v for k, v in filters.items() if v})
    return {
        "b": overview,
        "ledger": ledger,
        "filters": filters,
        "filter_query": query,
        "choices": selectors.ledger_filter_choices(actor=actor),
        "cursor": cursor,
        "topup_amounts": services.TOPUP_DOLLARS,
        "chart_days": charts.spend_per_day(overview["chart"]),
        "chart_runtimes": charts.spend_per_runtime(overview["byRuntime30d"], overview["chart"]["runtimes"]),
        "legend": [(r, charts.color_of(i)) for i, r in enumerate(overview["chart"]["runtimes"])],
    }


@require_GET
@dash_view
def billing(request):
    filters, cursor = _filters(request), request.GET.get("cursor") or None
    try:
        context = _context(request, filters=filters, cursor=cursor)
    except ServiceError as exc:
        if exc.code != "INVALID_ARGUMENT":
            raise
        return render(request, "dash/billing.html", {**_context(request), "error": exc}, status=exc.http_status)
    topup = request.GET.get("topup")
    if topup == "done":
        context["notice"] = _("Payment received: the credit appears here as soon as the card processor confirms it.")
    elif topup == "canceled":
        context["notice"] = _("Top-up canceled; nothing was charged.")
    return render(request, "dash/billing.html", context)


def _cap_micros(request) -> int | None:
    if "clear" in request.POST:
        return None
    raw = field(request, "cap").replace(",", "").removeprefix("$")
    try:
        dollars = Decimal(raw)
    except InvalidOperation:
        raise invalid("cap", _("The monthly cap is an amount in dollars, e.g. 50.")) from None
    # The service checks the range; this only turns dollars into whole micro-dollars.
    if not dollars.is_finite() or abs(dollars) > services.MAX_CAP_MICROS or dollars != round(dollars, 6):
        raise invalid("cap", _("The monthly cap is an amount in dollars, e.g. 50."))
    return int(dollars * 1_000_000)


@require_POST
@dash_view
def billing_cap(request):
    try:
        cap = services.billing_cap_set(actor=request.actor, cap_micros=_cap_micros(request))["monthlyCapMicros"]
    except ServiceError as exc:
        if exc.code == "FORBIDDEN":
            raise
        return render(request, "dash/billing.html", {**_context(request), "error": exc}, status=exc.http_status)
    if cap is None:
        messages.success(request, _("Monthly cap cleared."))
    else:
        messages.success(request, _("Monthly cap set to %(amount)s.") % {"amount": charts.usd(cap)})
    return redirect("dash:billing")


@require_GET
@dash_view
def billing_ledger_csv(request):
    return ledger_csv_response(request, request.actor, _filters(request))


@require_POST
@dash_view
def billing_topup(request):
    amount = field(request, "amount")
    try:
        session = services.topup_checkout(
            actor=request.actor, amount_dollars=int(amount) if amount.isdigit() else amount, email=request.user.email
        )
    except ServiceError as exc:
        if exc.code == "FORBIDDEN":
            raise
        return render(request, "dash/billing.html", {**_context(request), "error": exc}, status=exc.http_status)
    return redirect(session["url"])
