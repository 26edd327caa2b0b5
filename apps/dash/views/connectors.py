"""Connectors (owners create and revoke; members read): GitHub / GitLab repositories
tied to projects, each with its delivery log and writebacks. The webhook secret is
rendered once in the POST response (no-store) and never kept in the session."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from apps.core.errors import ServiceError
from apps.dash.context import dash_view
from apps.dash.views.common import field, no_store, page_with_error
from apps.intake import connectors as intake
from apps.orgs.models import Project


def _context(request, **extra) -> dict:
    actor = request.actor
    rows = intake.connectors_list(actor=actor)
    selected = request.GET.get("c") or extra.pop("selected", None) or (rows[0]["connectorId"] if rows else None)
    return {
        "connectors": rows,
        "selected": intake.connector_log(actor=actor, connector_id=selected, limit=30) if selected else None,
        "projects": list(Project.objects.filter(org_id=actor.org.pk).order_by("prefix")),
        **extra,
    }


@require_GET
@dash_view
def connectors(request):
    return render(request, "dash/connectors.html", _context(request))


@require_POST
@dash_view
def connector_create(request):
    try:
        created = intake.connector_create(
            actor=request.actor,
            provider=field(request, "provider"),
            project=field(request, "project"),
            repo=field(request, "repo"),
            token=field(request, "token") or None,
            api_url=field(request, "api_url") or None,
            pr_sync=request.POST.get("pr_sync") == "on",
        )
    except ServiceError as exc:
        return page_with_error(request, "dash/connectors.html", _context(request), exc)
    context = _context(request, created=created, selected=created["connectorId"])
    return no_store(render(request, "dash/connectors.html", context, status=201))


@require_POST
@dash_view
def connector_revoke(request, connector_id: str):
    try:
        row = intake.connector_revoke(actor=request.actor, connector_id=connector_id)
    except ServiceError as exc:
        return page_with_error(request, "dash/connectors.html", _context(request), exc)
    messages.success(request, _("Revoked the connector for %(repo)s; its deliveries are refused.") % {"repo": row["repo"]})
    return redirect("dash:connectors")
