"""Issue pages: create, drill-down, edit, and the actions a human takes on one issue.

Each action calls one service (send-back is a comment and then the transition, as the
rule requires a comment first) and redirects back; a refusal re-renders the issue page
with the service's message at the service's HTTP status.
"""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.core.errors import ServiceError
from apps.dash.context import dash_view
from apps.dash.selectors import issue_page
from apps.dash.views.common import csv, field, lines, text
from apps.issues import acceptance as acceptance_rules
from apps.issues import services as issue_services
from apps.orgs.models import Membership, Project


def _issue_url(identifier: str) -> str:
    return reverse("dash:issue", args=[identifier.upper()])


def _refused(request, identifier: str, exc: ServiceError):
    try:
        context = issue_page(actor=request.actor, identifier=identifier)
    except ServiceError:
        return render(request, "dash/error.html", {"error": exc}, status=exc.http_status)
    context["error"] = exc
    return render(request, "dash/issue.html", context, status=exc.http_status)


def _act(request, identifier: str, fn, done: str):
    try:
        fn()
    except ServiceError as exc:
        return _refused(request, identifier, exc)
    messages.success(request, done)
    return redirect(_issue_url(identifier))


@require_GET
@dash_view
def issue_detail(request, identifier: str):
    return render(request, "dash/issue.html", issue_page(actor=request.actor, identifier=identifier))


@require_GET
@dash_view
def issue_live(request, identifier: str):
    return render(request, "dash/_issue_live.html", issue_page(actor=request.actor, identifier=identifier))


def _form_choices(actor) -> dict:
    return {
        "projects": list(Project.objects.filter(org_id=actor.org.pk).order_by("prefix")),
        "members": list(
            Membership.objects.filter(org_id=actor.org.pk, status=Membership.Status.ACTIVE)
            .select_related("user")
            .order_by("user__email")
        ),
    }


@require_http_methods(["GET", "POST"])
@dash_view
def issue_new(request):
    actor = request.actor
    context = {**_form_choices(actor), "values": request.POST or {"work": "on", "project": request.GET.get("project", "")}}
    if request.method == "GET":
        return render(request, "dash/issue_form.html", context)
    blocked_by = csv(field(request, "blocked_by"))
    try:
        issue = issue_services.issue_create(
            actor=actor,
            project=field(request, "project") or None,
            title=field(request, "title"),
            body=text(request, "body") or None,
            work=request.POST.get("work") == "on",
            blocked_by=blocked_by or None,
            no_dependency=field(request, "no_dependency") or None,
            status=field(request, "status") or None,
            priority=field(request, "priority") or 0,
            due_at=field(request, "due_at") or None,
            assignee=field(request, "assignee") or None,
            labels=csv(field(request, "labels")) or None,
            acceptance=[acceptance_rules.from_line(line) for line in lines(request.POST.get("acceptance", ""))] or None,
            parent=field(request, "parent") or None,
        )
    except ServiceError as exc:
        return render(request, "dash/issue_form.html", {**context, "error": exc}, status=exc.http_status)
    messages.success(request, _("Created %(identifier)s.") % {"identifier": issue.identifier})
    return redirect(_issue_url(issue.identifier))


def _edit_values(issue, shape) -> dict:
    due = timezone.localtime(issue.due_at).date().isoformat() if issue.due_at else ""
    return {
        "title": shape["title"],
        "body": shape["body"],
        "priority": str(shape["priority"]),
        "due_at": due,
        "labels": ", ".join(shape["labels"]),
        "acceptance": "\n".join(acceptance_rules.to_line(c) for c in shape["acceptance"]),
        "evidence": "\n".join(acceptance_rules.evidence_text(e) for e in shape["evidence"]),
        "parent": shape["parent"] or "",
        "work": "on" if shape["work"] else "",
    }


@require_http_methods(["GET", "POST"])
@dash_view
def issue_edit(request, identifier: str):
    actor = request.actor
    page = issue_page(actor=actor, identifier=identifier)
    initial = _edit_values(page["issue"], page["s"])
    context = {**page, **_form_choices(actor), "values": request.POST or initial, "editing": True}
    if request.method == "GET":
        return render(request, "dash/issue_form.html", context)
    # Only what the person changed is sent: an untouched field is not a write.
    changes: dict = {}
    submitted = {
        "title": field(request, "title"),
        "body": text(request, "body"),
        "priority": field(request, "priority"),
        "due_at": field(request, "due_at"),
        "labels": field(request, "labels"),
        "acceptance": "\n".join(lines(request.POST.get("acceptance", ""))),
        "evidence": "\n".join(lines(request.POST.get("evidence", ""))),
        "parent": field(request, "parent"),
        "work": "on" if request.POST.get("work") == "on" else "",
    }
    for name, value in submitted.items():
        present = "work_field" in request.POST if name == "work" else name in request.POST
        if not present or value == initial[name]:
            continue
        if name == "labels":
            changes["labels"] = csv(value)
        elif name == "acceptance":
            changes["acceptance"] = [acceptance_rules.from_line(line) for line in lines(value)]
        elif name == "evidence":
            changes["evidence"] = lines(value)
        elif name == "work":
            changes["work"] = value == "on"
        elif name in ("due_at", "parent"):
            changes[name] = value or None
        elif name == "body":
            changes["body"] = value or None
        else:
            changes[name] = value
    if not changes:
        messages.info(request, _("Nothing changed."))
        return redirect(_issue_url(identifier))
    try:
        issue = issue_services.issue_update(actor=actor, identifier=identifier, **changes)
    except ServiceError as exc:
        return render(request, "dash/issue_form.html", {**context, "error": exc}, status=exc.http_status)
    messages.success(request, _("Saved %(identifier)s.") % {"identifier": issue.identifier})
    return redirect(_issue_url(issue.identifier))


HUMAN_STATUSES = ("todo", "blocked", "done")


@require_POST
@dash_view
def issue_status(request, identifier: str):
    status = field(request, "status")
    return _act(
        request,
        identifier,
        lambda: issue_services.issue_update(actor=request.actor, identifier=identifier, status=status),
        _("Status changed."),
    )


@require_POST
@dash_view
def issue_assign(request, identifier: str):
    assignee = field(request, "assignee") or "none"
    return _act(
        request,
        identifier,
        lambda: issue_services.issue_update(actor=request.actor, identifier=identifier, assignee=assignee),
        _("Lane assigned."),
    )


@require_POST
@dash_view
def issue_triage(request, identifier: str):
    return _act(
        request,
        identifier,
        lambda: issue_services.issue_update(actor=request.actor, identifier=identifier, awaiting_triage=False),
        _("Signed off: the issue can now be dispatched."),
    )


@require_POST
@dash_view
def issue_cancel(request, identifier: str):
    reason = field(request, "cancel_reason")

    def cancel():
        issue_services.issue_update(actor=request.actor, identifier=identifier, status="canceled", cancel_reason=reason or None)

    return _act(request, identifier, cancel, _("Canceled."))


@require_POST
@dash_view
def issue_review(request, identifier: str):
    decision = field(request, "decision")
    comment = field(request, "comment")

    def review():
        if decision == "promote":
            issue_services.issue_update(actor=request.actor, identifier=identifier, status="done")
        elif decision == "send_back":
            if comment:
                issue_services.comment_create(actor=request.actor, issue=identifier, body=comment)
            issue_services.issue_update(actor=request.actor, identifier=identifier, status="todo")
        else:
            raise ServiceError("INVALID_ARGUMENT", "Choose promote or send back.", field="decision")

    done = _("Promoted to done.") if decision == "promote" else _("Sent back to todo.")
    return _act(request, identifier, review, done)


@require_POST
@dash_view
def relation_add(request, identifier: str):
    kind, other = field(request, "type"), field(request, "target")
    return _act(
        request,
        identifier,
        lambda: issue_services.relation_add(actor=request.actor, source_id=identifier, target_id=other, type=kind),
        _("Relation added."),
    )


@require_POST
@dash_view
def relation_remove(request, identifier: str):
    kind, source, target = field(request, "type"), field(request, "source"), field(request, "target")
    return _act(
        request,
        identifier,
        lambda: issue_services.relation_remove(actor=request.actor, source_id=source, target_id=target, type=kind),
        _("Relation removed."),
    )


@require_POST
@dash_view
def comment_add(request, identifier: str):
    body = text(request, "body")
    return _act(
        request,
        identifier,
        lambda: issue_services.comment_create(actor=request.actor, issue=identifier, body=body),
        _("Comment added."),
    )


@require_POST
@dash_view
def comment_retract(request, identifier: str, comment_id):
    note = field(request, "note")
    return _act(
        request,
        identifier,
        lambda: issue_services.comment_retract(actor=request.actor, comment=str(comment_id), note=note or None),
        _("Comment retracted."),
    )


@require_POST
@dash_view
def attachment_add(request, identifier: str):
    url, title = field(request, "url"), field(request, "title")
    return _act(
        request,
        identifier,
        lambda: issue_services.attachment_create(actor=request.actor, issue=identifier, url=url, title=title or None),
        _("Attachment added."),
    )


@require_POST
@dash_view
def attachment_obsolete(request, identifier: str, attachment_id):
    reason = field(request, "reason")
    return _act(
        request,
        identifier,
        lambda: issue_services.attachment_obsolete(actor=request.actor, attachment=str(attachment_id), reason=reason or None),
        _("Attachment marked obsolete."),
    )
