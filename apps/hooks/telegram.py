"""POST /hooks/telegram/<channelId>: Telegram's updates, checked by the secret token.

The reply goes back in the webhook's answer (a ``sendMessage`` method body), so answering
a member needs no outbound call.
"""

from __future__ import annotations

import json

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.hooks.chat import channel_or_refusal, refusal, unauthorized
from apps.notifications import inbound


@csrf_exempt
@require_POST
def telegram(request, channel_id):
    channel, refused = channel_or_refusal(channel_id, "telegram")
    if refused:
        return refused
    if not inbound.telegram_genuine(channel, request.headers):
        return unauthorized()
    try:
        update = json.loads(request.body or b"{}")
    except ValueError:
        return refusal(400, "INVALID_ARGUMENT", "The body is not JSON.")
    message = update.get("message") if isinstance(update, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("chat"), dict) or "id" not in message["chat"]:
        return JsonResponse({})  # an update we do not act on
    chat_id = message["chat"]["id"]
    sender = message.get("from") or {}
    label = f"@{sender['username']}" if sender.get("username") else str(sender.get("first_name", ""))
    reply = inbound.message(channel=channel, sender=str(chat_id), text=str(message.get("text") or ""), label=label)
    return JsonResponse({"method": "sendMessage", "chat_id": chat_id, "text": reply})
