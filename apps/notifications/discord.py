"""Discord over plain HTTP (httpx2): open the DM channel, post the message with a nonce."""

from __future__ import annotations

import httpx2
from django.conf import settings

from apps.notifications.providers import SendError, retry_after


def _post(token: str, path: str, body: dict, idempotency_key: str | None = None) -> dict:
    headers = {"Authorization": f"Bot {token}", "User-Agent": "Retasc (notifications)"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    try:
        response = httpx2.post(
            settings.RETASC_DISCORD_API_URL + path, json=body, headers=headers, timeout=settings.RETASC_NOTIFY_TIMEOUT_SECONDS
        )
    except httpx2.HTTPError as exc:
        raise SendError(f"Discord could not be reached ({type(exc).__name__}).") from None
    if response.status_code >= 300:
        wait = retry_after(response.headers.get("Retry-After"))
        raise SendError(f"Discord answered {response.status_code}.", status=response.status_code, retry_after=wait)
    return response.json() if response.content else {}


def send_dm(*, token: str, user_id: str, text: str, idempotency_key: str) -> None:
    dm = _post(token, "/users/@me/channels", {"recipient_id": user_id})
    if not dm.get("id"):
        raise SendError("Discord opened no DM channel.")
    # A nonce with enforce_nonce makes Discord itself drop a repeat of this message.
    _post(
        token,
        f"/channels/{dm['id']}/messages",
        {"content": text[:2000], "nonce": idempotency_key[:25], "enforce_nonce": True},
        idempotency_key,
    )
