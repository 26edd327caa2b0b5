"""Reads of notifications, shaped for the API and the Dash. Secrets are never shaped."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from apps.core.errors import ServiceError
from apps.notifications.models import Binding, Channel, Delivery, Mute, Webhook
from apps.orgs.actor import Actor


def _owner(actor: Actor) -> None:
    if actor.is_agent or not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner sees notification channels' settings and webhooks.")


def channel_shape(channel: Channel, webhook_url: str) -> dict:
    return {
        "channelId": str(channel.pk),
        "kind": channel.kind,
        "webhookUrl": webhook_url,
        "createdAt": channel.created_at.isoformat(),
    }


def channels_list(*, actor: Actor) -> list[dict]:
    """Live channels of the org (any member: they pick one to bind). No token, no secret."""
    live = Channel.objects.filter(org_id=actor.org.pk, removed_at__isnull=True).order_by("created_at")
    return [channel_shape(channel, f"/hooks/{channel.kind}/{channel.pk}") for channel in live]


def bindings_list(*, actor: Actor) -> list[dict]:
    rows = Binding.objects.select_related("channel").filter(
        org_id=actor.org.pk, user_id=actor.principal_id, removed_at__isnull=True
    )
    return [
        {
            "bindingId": str(b.pk),
            "channelId": str(b.channel_id),
            "kind": b.channel.kind,
            "label": b.label,
            "createdAt": b.created_at.isoformat(),
        }
        for b in rows.order_by("created_at")
    ]


def mutes_of(*, actor: Actor) -> list[str]:
    return sorted(Mute.objects.filter(org_id=actor.org.pk, user_id=actor.principal_id).values_list("kind", flat=True))


def webhooks_list(*, actor: Actor) -> list[dict]:
    _owner(actor)
    hooks = Webhook.objects.filter(org_id=actor.org.pk, removed_at__isnull=True).order_by("created_at")
    return [{"webhookId": str(h.pk), "url": h.url, "events": h.events, "createdAt": h.created_at.isoformat()} for h in hooks]


def delivery_shape(d: Delivery) -> dict:
    target = d.webhook_id and "webhook" or (d.binding.channel.kind if d.binding_id and d.binding else "gone")
    return {
        "deliveryId": str(d.pk),
        "kind": d.outbox.kind,
        "to": target,
        "label": (d.binding.label if d.binding_id and d.binding else ""),
        "status": d.status,
        "attempts": d.attempts,
        "lastStatus": d.last_status,
        "lastError": d.last_error,
        "createdAt": d.created_at.isoformat(),
        "sentAt": d.sent_at.isoformat() if d.sent_at else None,
    }


def deliveries(*, actor: Actor, dead: bool = False, webhook_id=None, limit: int = 100) -> list[dict]:
    _owner(actor)
    rows = Delivery.objects.select_related("outbox", "binding", "binding__channel").filter(org_id=actor.org.pk)
    if dead:
        rows = rows.filter(status=Delivery.Status.DEAD)
    if webhook_id is not None:
        try:
            rows = rows.filter(webhook_id=webhook_id)
        except ValidationError:
            return []
    elif not dead:
        rows = rows.filter(webhook__isnull=False)
    return [delivery_shape(d) for d in rows.order_by("-created_at")[:limit]]
