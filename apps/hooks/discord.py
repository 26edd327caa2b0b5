"""POST /hooks/discord/<channelId>: Discord interactions, checked by Ed25519.

The ``/retasc`` application command: ``/retasc connect code:CODE``, or any intent as
``/retasc say text:...``. A PING is answered with a PONG (Discord checks the endpoint so).
"""

from __future__ import annotations

import json

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.hooks.chat import channel_or_refusal, refusal, unauthorized
from apps.notifications import inbound

PING, APPLICATION_COMMAND = 1, 2
PONG, CHANNEL_MESSAGE = 1, 4
EPHEMERAL = 64


def _text(data: dict) -> str:
    """The command's words: a subcommand's name followed by its options' values."""
    words = []
    for option in data.get("options") or []:
        if not isinstance(option, dict):
            continue
        if option.get("options") is not None:  # a subcommand
            if option.get("name") != "say":
                words.append(str(option.get("name", "")))
            words.extend(str(o.get("value", "")) for o in option["options"] if isinstance(o, dict))
        else:
            words.append(str(option.get("value", "")))
    return " ".join(w for w in words if w)


@csrf_exempt
@require_POST
def discord(request, channel_id):
    channel, refused = channel_or_refusal(channel_id, "discord")
    if refused:
        return refused
    body = request.body
    if not inbound.discord_genuine(channel, request.headers, body):
        return unauthorized()
    try:
        interaction = json.loads(body or b"{}")
    except ValueError:
        return refusal(400, "INVALID_ARGUMENT", "The body is not JSON.")
    if interaction.get("type") == PING:
        return JsonResponse({"type": PONG})
    if interaction.get("type") != APPLICATION_COMMAND:
        return JsonResponse({"type": CHANNEL_MESSAGE, "data": {"content": "Unsupported interaction.", "flags": EPHEMERAL}})
    user = (interaction.get("member") or {}).get("user") or interaction.get("user") or {}
    if not user.get("id"):
        return refusal(400, "INVALID_ARGUMENT", "The interaction names no user.")
    text = _text(interaction.get("data") or {})
    label = f"@{user['username']}" if user.get("username") else ""
    reply = inbound.message(channel=channel, sender=str(user["id"]), text=text, label=label)
    return JsonResponse({"type": CHANNEL_MESSAGE, "data": {"content": reply, "flags": EPHEMERAL}})
