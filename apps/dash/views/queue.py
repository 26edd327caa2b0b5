from __future__ import annotations

from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from apps.dash.context import dash_view
from apps.dash.selectors import QueueFilters, fleet_page, queue_page


@require_GET
@dash_view
def home(request):
    return redirect("dash:queue")


@require_GET
@dash_view
def queue(request):
    filters = QueueFilters.from_query(request.GET)
    context = queue_page(actor=request.actor, filters=filters)
    return render(request, "dash/queue.html", context)


@require_GET
@dash_view
def queue_live(request):
    """The counts and the table only: what a live event refreshes."""
    filters = QueueFilters.from_query(request.GET)
    context = queue_page(actor=request.actor, filters=filters)
    return render(request, "dash/_queue_live.html", context)


@require_GET
@dash_view
def fleet(request):
    return render(request, "dash/fleet.html", fleet_page(actor=request.actor))


@require_GET
@dash_view
def fleet_live(request):
    return render(request, "dash/_fleet_live.html", fleet_page(actor=request.actor))
