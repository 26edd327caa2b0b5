"""Imports (owners): start a Linear import (the API key is passed to the service for the
run and never rendered back, kept in the session or stored by the page) or upload a Retasc
export / beads issues.jsonl; the list of past imports; one import's page, which follows
the job live (``import.progress`` events on the org's socket make the page re-read its
fragment) with its errors and summary. The services refuse non-owners with FORBIDDEN."""

from __future__ import annotations

from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.core.errors import ServiceError
from apps.dash.context import dash_view
from apps.dash.views.common import csv, field, page_with_error
from apps.intake.imports.services import import_get, import_list, import_shape, import_start
from apps.intake.models import ImportSource

FILE_SOURCES = tuple(s for s in ImportSource.values if s != ImportSource.LINEAR)


def _context(request, **extra) -> dict:
    return {"imports": [import_shape(job) for job in import_list(actor=request.actor)], "file_sources": FILE_SOURCES, **extra}


def _failed(request, exc: ServiceError, **form):
    # The key is never put back into the form: the person types it again.
    return page_with_error(request, "dash/imports.html", _context(request, form=form), exc)


@require_GET
@dash_view
def imports(request):
    return render(request, "dash/imports.html", _context(request, form={}))


@require_POST
@dash_view
def import_linear(request):
    teams = [team.upper() for team in csv(field(request, "teams"))]
    try:
        job = import_start(actor=request.actor, source="linear", api_key=field(request, "api_key") or None, teams=teams or None)
    except ServiceError as exc:
        return _failed(request, exc, teams=", ".join(teams))
    return redirect("dash:import", import_id=import_shape(job)["importId"])


@require_POST
@dash_view
def import_file(request):
    source = field(request, "source")
    upload = request.FILES.get("file")
    try:  # no file: import_start refuses it (field file)
        job = import_start(
            actor=request.actor, source=source, upload=upload.read() if upload else None, filename=getattr(upload, "name", None)
        )
    except ServiceError as exc:
        return _failed(request, exc, source=source)
    return redirect("dash:import", import_id=import_shape(job)["importId"])


def _job_context(request, import_id) -> dict:
    job = import_shape(import_get(actor=request.actor, import_id=str(import_id)))
    total, done = job.get("total"), job.get("done") or 0
    percent = min(100, round(100 * done / total)) if total else (100 if job["status"] == "done" else 0)
    return {"job": job, "percent": percent, "finished": job["status"] in ("done", "failed")}


@require_GET
@dash_view
def import_detail(request, import_id):
    return render(request, "dash/import.html", _job_context(request, import_id))


@require_GET
@dash_view
def import_live(request, import_id):
    return render(request, "dash/_import_live.html", _job_context(request, import_id))
