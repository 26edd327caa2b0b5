"""The queue (table and board), the fleet, saved filters and bulk changes to issues.

The table and the board read through the same filters (apps.dash.selectors); a saved
filter is that filter's query string, kept per member; a bulk change applies one change
to the selected issues through the issue service, one unit of work per issue.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from apps.core.errors import ServiceError
from apps.dash.context import dash_view
from apps.dash.selectors import QueueFilters, board_page, fleet_page, queue_page
from apps.dash.views.common import csv, field
from apps.issues.services import issue_bulk_update
from apps.orgs.selectors import saved_filters_for
from apps.orgs.services import saved_filter_delete, saved_filter_save

VIEWS = {"queue": "dash:queue", "board": "dash:board"}


@require_GET
@dash_view
def home(request):
    return redirect("dash:queue")


def _page(request, selector, template: str, view: str):
    filters = QueueFilters.from_query(request.GET)
    context = selector(actor=request.actor, filters=filters)
    context["view"] = view
    context["saved_filters"] = saved_filters_for(actor=request.actor)
    return render(request, template, context)


@require_GET
@dash_view
def queue(request):
    return _page(request, queue_page, "dash/queue.html", "queue")


@require_GET
@dash_view
def queue_live(request):
    """The counts and the table only: what a live event refreshes."""
    filters = QueueFilters.from_query(request.GET)
    context = queue_page(actor=request.actor, filters=filters)
    return render(request, "dash/_queue_live.html", context)


@require_GET
@dash_view
def board(request):
    return _page(request, board_page, "dash/board.html", "board")


@require_GET
@dash_view
def board_live(request):
    """The columns only: what a live event refreshes."""
    filters = QueueFilters.from_query(request.GET)
    return render(request, "dash/_board_live.html", board_page(actor=request.actor, filters=filters))


def _back(request, *, offset: bool = True) -> str:
    """Where a form on the queue or board returns to: the same view with the same filters,
    rebuilt from the posted query (never a URL taken as given)."""
    view = VIEWS.get(request.POST.get("view", ""), "dash:queue")
    filters = QueueFilters.from_query(QueryDict(request.POST.get("filters", "")))
    query = filters.query() if offset else filters.query(offset="")
    return reverse(view) + (f"?{query}" if query else "")


@require_POST
@dash_view
def queue_bulk(request):
    """Change status, priority, lane or labels of the selected issues."""
    changes: dict = {}
    if field(request, "status"):
        changes["status"] = field(request, "status")
    if field(request, "priority"):
        changes["priority"] = field(request, "priority")
    if field(request, "assignee"):
        changes["assignee"] = field(request, "assignee")
    if csv(field(request, "add_label")):
        changes["labels_add"] = csv(field(request, "add_label"))
    if csv(field(request, "remove_label")):
        changes["labels_remove"] = csv(field(request, "remove_label"))
    try:
        results = issue_bulk_update(actor=request.actor, identifiers=request.POST.getlist("issue"), **changes)
    except ServiceError as exc:
        messages.error(request, f"{exc.code}: {exc.message}")
        return redirect(_back(request))
    done = [r["identifier"] for r in results if r["ok"]]
    if done:
        messages.success(
            request,
            ngettext("Changed %(n)d issue: %(list)s.", "Changed %(n)d issues: %(list)s.", len(done))
            % {"n": len(done), "list": ", ".join(done)},
        )
    for r in results:
        if not r["ok"]:
            messages.error(request, f"{r['identifier']}: {r['error'].code} — {r['error'].message}")
    return redirect(_back(request))


@require_POST
@dash_view
def filter_save(request):
    filters = QueueFilters.from_query(QueryDict(request.POST.get("filters", "")))
    name = field(request, "name")
    try:
        saved_filter_save(actor=request.actor, name=name, query=filters.query(offset=""))
    except ServiceError as exc:
        messages.error(request, f"{exc.code}: {exc.message}")
    else:
        messages.success(request, _("Saved the filter “%(name)s”.") % {"name": name})
    return redirect(_back(request, offset=False))


@require_POST
@dash_view
def filter_delete(request, filter_id):
    try:
        saved_filter_delete(actor=request.actor, filter_id=filter_id)
    except ServiceError as exc:
        messages.error(request, f"{exc.code}: {exc.message}")
    else:
        messages.success(request, _("Deleted the saved filter."))
    return redirect(_back(request))


@require_GET
@dash_view
def fleet(request):
    return render(request, "dash/fleet.html", fleet_page(actor=request.actor))


@require_GET
@dash_view
def fleet_live(request):
    return render(request, "dash/_fleet_live.html", fleet_page(actor=request.actor))
