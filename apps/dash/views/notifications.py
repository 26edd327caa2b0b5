"""Notifications in the Dash: channels (owners), my bindings and mutes (members), dead
letters with retry and outgoing webhooks with redeliver (owners), and the approval link's
confirmation page.

Every rule is the services'; the views parse, call one service, and render. A secret (a
binding code, a webhook's signing secret) is rendered once in the POST answer, no-store.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.core.errors import ServiceError
from apps.dash.context import dash_view, error_response
from apps.dash.views.common import csv, field, no_store, page_with_error
from apps.notifications import approvals, selectors, services
from apps.notifications.models import EVENT_KINDS


def _channels_context(request) -> dict:
    actor = request.actor
    return {
        "channels": [{**c, "inboundUrl": settings.PUBLIC_URL + c["webhookUrl"]} for c in selectors.channels_list(actor=actor)],
        "kinds": ["slack", "discord", "telegram", "email"],
    }


@require_GET
@dash_view
def channels(request):
    return render(request, "dash/notify_channels.html", _channels_context(request))


@require_POST
@dash_view
def channel_create(request):
    try:
        services.channel_create(
            actor=request.actor,
            kind=field(request, "kind"),
            bot_token=field(request, "bot_token") or None,
            signing_secret=field(request, "signing_secret") or None,
            public_key=field(request, "public_key") or None,
        )
    except ServiceError as exc:
        return page_with_error(request, "dash/notify_channels.html", _channels_context(request), exc)
    messages.success(request, _("Channel added."))
    return redirect("dash:notify_channels")


@require_POST
@dash_view
def channel_remove(request, channel_id: str):
    services.channel_remove(actor=request.actor, channel_id=channel_id)
    messages.success(request, _("Channel removed."))
    return redirect("dash:notify_channels")


@require_POST
@dash_view
def channel_test(request, channel_id: str):
    try:
        services.channel_send_test(actor=request.actor, channel_id=channel_id)
    except ServiceError as exc:
        return page_with_error(request, "dash/notify_channels.html", _channels_context(request), exc)
    messages.success(request, _("Test message queued to your own chats on this channel."))
    return redirect(request.POST.get("next") or "dash:notify_channels")


# --- bindings and mutes (every member) --------------------------------------------------


def _bindings_context(request) -> dict:
    actor = request.actor
    return {
        "bindings": selectors.bindings_list(actor=actor),
        "channels": selectors.channels_list(actor=actor),
        "mutes": selectors.mutes_of(actor=actor),
        "kinds": EVENT_KINDS,
    }


@require_GET
@dash_view
def bindings(request):
    return render(request, "dash/notify_bindings.html", _bindings_context(request))


@require_POST
@dash_view
def binding_create(request):
    channel_id = field(request, "channel")
    try:
        channel = services.channel_get(org_id=request.actor.org.pk, channel_id=channel_id)
        if channel.kind == "email":
            services.binding_email(actor=request.actor, channel_id=channel.pk)
            messages.success(request, _("Your verified address is bound."))
            return redirect("dash:notify_bindings")
        code, expires = services.binding_code_create(actor=request.actor, channel_id=channel.pk)
    except ServiceError as exc:
        return page_with_error(request, "dash/notify_bindings.html", _bindings_context(request), exc)
    context = {**_bindings_context(request), "new_code": code, "code_kind": channel.kind, "code_expires": expires}
    return no_store(render(request, "dash/notify_bindings.html", context))


@require_POST
@dash_view
def binding_remove(request, binding_id: str):
    services.binding_remove(actor=request.actor, binding_id=binding_id)
    messages.success(request, _("Binding removed."))
    return redirect("dash:notify_bindings")


@require_POST
@dash_view
def mute_toggle(request):
    kind = field(request, "kind")
    services.mute_set(
        org_id=request.actor.org.pk, user_id=request.actor.principal_id, kind=kind, muted=field(request, "muted") == "1"
    )
    return redirect("dash:notify_bindings")


# --- dead letters and webhooks (owners) ------------------------------------------------------


@require_GET
@dash_view
def dead_letters(request):
    return render(request, "dash/notify_dead.html", {"deliveries": selectors.deliveries(actor=request.actor, dead=True)})


@require_POST
@dash_view
def delivery_retry(request, delivery_id: str):
    services.delivery_retry(actor=request.actor, delivery_id=delivery_id)
    messages.success(request, _("Queued again."))
    return redirect(request.POST.get("next") or "dash:notify_dead")


def _webhooks_context(request) -> dict:
    return {
        "webhooks": selectors.webhooks_list(actor=request.actor),
        "deliveries": selectors.deliveries(actor=request.actor),
        "kinds": EVENT_KINDS,
    }


@require_GET
@dash_view
def webhooks(request):
    return render(request, "dash/notify_webhooks.html", _webhooks_context(request))


@require_POST
@dash_view
def webhook_create(request):
    try:
        hook, secret = services.webhook_create(
            actor=request.actor, url=field(request, "url"), events=request.POST.getlist("events") or csv(field(request, "events"))
        )
    except ServiceError as exc:
        if exc.code == "FORBIDDEN":
            raise
        return page_with_error(request, "dash/notify_webhooks.html", _webhooks_context(request), exc)
    context = {**_webhooks_context(request), "new_secret": secret, "new_webhook": str(hook.pk)}
    return no_store(render(request, "dash/notify_webhooks.html", context))


@require_POST
@dash_view
def webhook_remove(request, webhook_id: str):
    services.webhook_remove(actor=request.actor, webhook_id=webhook_id)
    messages.success(request, _("Webhook removed."))
    return redirect("dash:notify_webhooks")


# --- approval links: GET shows, POST acts ------------------------------------------------------


@require_http_methods(["GET", "POST"])
def approve(request, token: str):
    """The link is the credential (signed, single use, for one member and one review)."""
    try:
        if request.method == "GET":
            _, issue = approvals.link_open(token)
            return no_store(render(request, "dash/notify_approve.html", {"issue": issue, "token": token}))
        issue = approvals.link_use(token)
    except ServiceError as exc:
        return error_response(request, exc, template="dash/notify_approve.html")
    return no_store(render(request, "dash/notify_approve.html", {"issue": issue, "approved": True}))
