"""What the chat providers' inbound endpoints share: finding the channel, refusals."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import JsonResponse

from apps.notifications.models import Channel


def refusal(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


def channel_or_refusal(channel_id, kind: str) -> tuple[Channel | None, JsonResponse | None]:
    try:
        channel = Channel.objects.filter(pk=channel_id, kind=kind).first()
    except ValidationError:  # a malformed id (not a UUID) reads as unknown
        channel = None
    if channel is None:
        return None, refusal(404, "NOT_FOUND", "No such channel.")
    if channel.removed_at is not None:
        return None, refusal(410, "GONE", "This channel was removed.")
    return channel, None


def unauthorized() -> JsonResponse:
    return refusal(401, "UNAUTHORIZED", "The request's signature is not valid.")
