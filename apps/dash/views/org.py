"""Org management: projects, members, invites, agent keys, and switching orgs.

Owner-only rules are enforced by the services (``FORBIDDEN``); the templates only hide
buttons a person cannot use. Secrets (a minted key, an invite code) are rendered once in
the POST response, marked no-store, and never kept in the session.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.session import SESSION_ORG, switch_org
from apps.core.errors import ServiceError, not_found
from apps.dash.agent_configs import configs
from apps.dash.context import dash_view
from apps.dash.selectors import USAGE_WINDOW, claimable_placeholders, keys_page, member_usage
from apps.dash.views.common import field, no_store, page_with_error
from apps.intake.imports import people
from apps.issues.services import org_delete_as
from apps.leases import revocation
from apps.orgs import selectors as org_selectors
from apps.orgs import services as org_services
from apps.orgs.models import Project
from apps.orgs.services import KNOWN_RUNTIMES

MEMBER_ACTIONS = {
    "suspend": (revocation.member_suspend, gettext_lazy("Suspended %(email)s; their agent keys were retired.")),
    "reactivate": (revocation.member_reactivate, gettext_lazy("Reactivated %(email)s.")),
    "retire": (revocation.member_retire, gettext_lazy("Retired %(email)s; their agent keys were retired.")),
}


# --- projects ------------------------------------------------------------------------


def _projects_context(actor) -> dict:
    return {"projects": org_selectors.projects_list(actor=actor)}


@require_GET
@dash_view
def projects(request):
    return render(request, "dash/projects.html", _projects_context(request.actor))


@require_POST
@dash_view
def project_create(request):
    try:
        project = org_services.project_create_as(
            actor=request.actor, prefix=field(request, "prefix"), name=field(request, "name")
        )
    except ServiceError as exc:
        return page_with_error(request, "dash/projects.html", _projects_context(request.actor), exc)
    messages.success(request, _("Created project %(prefix)s.") % {"prefix": project.prefix})
    return redirect("dash:projects")


@require_POST
@dash_view
def project_rename(request, prefix: str):
    try:
        project = org_services.project_rename(
            actor=request.actor,
            prefix=prefix,
            new_prefix=field(request, "new_prefix") or prefix,
            name=field(request, "name") or None,
        )
    except ServiceError as exc:
        return page_with_error(request, "dash/projects.html", _projects_context(request.actor), exc)
    messages.success(request, _("Saved project %(prefix)s; old identifiers keep working.") % {"prefix": project.prefix})
    return redirect("dash:projects")


# --- members -------------------------------------------------------------------------


def _members_context(request) -> dict:
    members = org_selectors.members_list(actor=request.actor, query=request.GET.get("q") or None)
    mine = claimable_placeholders(actor=request.actor, email=request.user.email)
    for m in members:
        m["claimable"] = m["memberId"] in mine
    return {
        "members": members,
        "has_claimable": any(m["claimable"] for m in members),
        "merge_targets": [m for m in members if m["status"] == "active"] if request.actor.is_owner else [],
        "q": request.GET.get("q", ""),
        "usage": member_usage(actor=request.actor),
        "usage_days": USAGE_WINDOW.days,
    }


@require_GET
@dash_view
def members(request):
    return render(request, "dash/members.html", _members_context(request))


@require_POST
@dash_view
def member_action(request, member_id: int, action: str):
    if action not in MEMBER_ACTIONS:
        raise not_found("Action")
    service, done = MEMBER_ACTIONS[action]
    try:
        result = service(actor=request.actor, member_id=str(member_id))
    except ServiceError as exc:
        return page_with_error(request, "dash/members.html", _members_context(request), exc)
    messages.success(request, str(done) % {"email": result["email"]})
    return redirect("dash:members")


@require_POST
@dash_view
def member_claim(request, member_id: int):
    try:
        result = people.placeholder_claim(actor=request.actor, placeholder=str(member_id))
    except ServiceError as exc:
        return page_with_error(request, "dash/members.html", _members_context(request), exc)
    messages.success(request, _("Claimed: that history is yours now (%(email)s).") % {"email": result.user.email})
    return redirect("dash:members")


@require_POST
@dash_view
def member_merge(request, member_id: int):
    try:
        result = people.placeholder_merge(actor=request.actor, placeholder=str(member_id), into=field(request, "into"))
    except ServiceError as exc:
        return page_with_error(request, "dash/members.html", _members_context(request), exc)
    messages.success(request, _("Merged the placeholder into %(email)s.") % {"email": result.user.email})
    return redirect("dash:members")


# --- invites -------------------------------------------------------------------------


@require_GET
@dash_view
def invites(request):
    return render(request, "dash/invites.html", {"invites": org_selectors.invites_list(actor=request.actor)})


@require_POST
@dash_view
def invite_create(request):
    try:
        invite, raw = org_services.invite_create(
            actor=request.actor, expires_days=field(request, "expires_days") or 7, role=field(request, "role") or "member"
        )
    except ServiceError as exc:
        if exc.code == "FORBIDDEN":
            raise
        return page_with_error(request, "dash/invites.html", {"invites": org_selectors.invites_list(actor=request.actor)}, exc)
    link = request.build_absolute_uri(f"/invite/{raw}/")
    context = {
        "invites": org_selectors.invites_list(actor=request.actor),
        "new_code": raw,
        "new_link": link,
        "new_invite": invite,
    }
    return no_store(render(request, "dash/invites.html", context, status=201))


@require_POST
@dash_view
def invite_revoke(request, invite_id: int):
    try:
        org_services.invite_revoke(actor=request.actor, invite_id=invite_id)
    except ServiceError as exc:
        if exc.code == "FORBIDDEN":
            raise
        return page_with_error(request, "dash/invites.html", {"invites": org_selectors.invites_list(actor=request.actor)}, exc)
    messages.success(request, _("Invite revoked."))
    return redirect("dash:invites")


# --- agent keys ----------------------------------------------------------------------


def _keys_context(request) -> dict:
    actor = request.actor
    context = keys_page(actor=actor)
    context.update(
        projects=list(Project.objects.filter(org_id=actor.org.pk).order_by("prefix")),
        runtimes=KNOWN_RUNTIMES,
        members=org_selectors.members_list(actor=actor) if actor.is_owner else [],
        mcp_url=request.build_absolute_uri("/mcp"),
    )
    return context


def _shown_once(request, key, raw: str, what: str):
    context = _keys_context(request)
    context.update(new_key=key, new_raw=raw, new_what=what, agent_configs=configs(mcp_url=context["mcp_url"], raw_key=raw))
    return no_store(render(request, "dash/keys.html", context, status=201))


@require_GET
@dash_view
def keys(request):
    return render(request, "dash/keys.html", _keys_context(request))


@require_POST
@dash_view
def key_mint(request):
    try:
        key, raw = org_services.key_mint_as(
            actor=request.actor,
            project_prefix=field(request, "project"),
            runtime=field(request, "runtime"),
            label=field(request, "label"),
            for_member_id=field(request, "member") or None,
        )
    except ServiceError as exc:
        return page_with_error(request, "dash/keys.html", _keys_context(request), exc)
    return _shown_once(request, key, raw, "minted")


@require_POST
@dash_view
def key_rotate(request, key_id: int):
    try:
        key, raw = revocation.key_rotate_as(actor=request.actor, key_id=key_id)
    except ServiceError as exc:
        return page_with_error(request, "dash/keys.html", _keys_context(request), exc)
    return _shown_once(request, key, raw, "rotated")


@require_POST
@dash_view
def key_revoke(request, key_id: int):
    try:
        key = revocation.key_revoke_as(actor=request.actor, key_id=key_id)
    except ServiceError as exc:
        return page_with_error(request, "dash/keys.html", _keys_context(request), exc)
    messages.success(request, _("Revoked %(prefix)s…; its live claims ended.") % {"prefix": key.prefix})
    return redirect("dash:keys")


# --- deleting the org (crypto-shred) -------------------------------------------------


@require_http_methods(["GET", "POST"])
@dash_view
def org_delete(request):
    """An owner deletes the org, typing its slug to confirm: its data key is destroyed
    after commit, so its content is unrecoverable, from backups too."""
    if not request.actor.is_owner:
        raise org_services.forbidden("Only an org owner can delete the org.")
    if request.method == "GET":
        return render(request, "dash/org_delete.html")
    try:
        slug = org_delete_as(actor=request.actor, confirmation=field(request, "confirm"))
    except ServiceError as exc:
        return page_with_error(request, "dash/org_delete.html", {}, exc)
    request.session.pop(SESSION_ORG, None)
    messages.success(request, _("Deleted %(slug)s; its content can no longer be read.") % {"slug": slug})
    return redirect("dash:home")


# --- switching orgs ------------------------------------------------------------------


@require_POST
@dash_view
def org_switch(request):
    if not switch_org(request, field(request, "org")):
        raise not_found("Org")
    return redirect("dash:queue")


# --- org settings ----------------------------------------------------------------------


def _settings_context(actor) -> dict:
    org = actor.org
    return {
        "org_settings": {
            "lease_ttl_seconds": org.lease_ttl_seconds,
            "claim_cap": org.claim_cap,
            "timezone": org.timezone,
            "default_lease": settings.RETASC_LEASE_TTL_SECONDS,
            "default_cap": settings.RETASC_CLAIM_CAP,
        }
    }


@dash_view
def org_settings(request):
    if request.method == "POST":
        try:
            org_services.org_settings_update(
                actor=request.actor,
                lease_ttl_seconds=request.POST.get("lease_ttl_seconds", ""),
                claim_cap=request.POST.get("claim_cap", ""),
                timezone_name=request.POST.get("timezone", request.actor.org.timezone),
            )
        except ServiceError as exc:
            return page_with_error(request, "dash/org_settings.html", _settings_context(request.actor), exc)
        messages.success(request, _("Saved the org's settings."))
        return redirect("dash:org_settings")
    return render(request, "dash/org_settings.html", _settings_context(request.actor))
