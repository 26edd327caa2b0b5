"""Telegram's Bot API over plain HTTP (httpx2). The token is part of the URL: errors never echo it."""

from __future__ import annotations

import httpx2
from django.conf import settings

from apps.notifications.providers import SendError, retry_after


def _call(token: str, method: str, body: dict, idempotency_key: str | None = None) -> dict:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    try:
        response = httpx2.post(
            f"{settings.RETASC_TELEGRAM_API_URL}/bot{token}/{method}",
            json=body,
            headers=headers,
            timeout=settings.RETASC_NOTIFY_TIMEOUT_SECONDS,
        )
    except httpx2.HTTPError as exc:
        raise SendError(f"Telegram could not be reached ({type(exc).__name__}).") from None
    try:
        data = response.json()
    except ValueError:
        data = {}
    if response.status_code >= 300 or not data.get("ok", False):
        wait = retry_after(response.headers.get("Retry-After"))
        if wait is None and isinstance(data.get("parameters"), dict):
            wait = retry_after(data["parameters"].get("retry_after"))
        raise SendError(f"Telegram answered {response.status_code} to {method}.", status=response.status_code, retry_after=wait)
    return data


def send_message(*, token: str, chat_id: str, text: str, idempotency_key: str) -> None:
    _call(token, "sendMessage", {"chat_id": chat_id, "text": text, "disable_web_page_preview": True}, idempotency_key)


def set_webhook(*, token: str, url: str, secret_token: str) -> None:
    """Register the server's inbound URL with the secret token Telegram will send back."""
    _call(token, "setWebhook", {"url": url, "secret_token": secret_token, "allowed_updates": ["message"]})
