"""POST /hooks/slack/<channelId>: the ``/retasc`` slash command, checked by the signing secret (v0)."""

from __future__ import annotations

from urllib.parse import parse_qs

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.hooks.chat import channel_or_refusal, unauthorized
from apps.notifications import inbound


@csrf_exempt
@require_POST
def slack(request, channel_id):
    channel, refused = channel_or_refusal(channel_id, "slack")
    if refused:
        return refused
    body = request.body  # the raw bytes: the signature covers them exactly
    if not inbound.slack_genuine(channel, request.headers, body):
        return unauthorized()
    form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
    user_id = form.get("user_id", "")
    if not user_id:
        return JsonResponse({"response_type": "ephemeral", "text": "No user in this command."})
    label = f"@{form['user_name']}" if form.get("user_name") else ""
    reply = inbound.message(channel=channel, sender=user_id, text=form.get("text", ""), label=label)
    return JsonResponse({"response_type": "ephemeral", "text": reply})
