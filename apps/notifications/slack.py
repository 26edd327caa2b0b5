"""Slack, through ``slack-sdk``'s WebClient pointed at RETASC_SLACK_API_URL."""

from __future__ import annotations

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from apps.notifications.providers import SendError, retry_after


def _client(token: str, idempotency_key: str | None = None) -> WebClient:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return WebClient(
        token=token, base_url=settings.RETASC_SLACK_API_URL, timeout=settings.RETASC_NOTIFY_TIMEOUT_SECONDS, headers=headers
    )


def send_dm(*, token: str, user_id: str, text: str, idempotency_key: str) -> None:
    """A direct message from the bot to a Slack user (``chat.postMessage`` to the user id)."""
    try:
        _client(token, idempotency_key).chat_postMessage(channel=user_id, text=text, unfurl_links=False)
    except SlackApiError as exc:
        response = exc.response
        status = response.status_code
        error = response.data.get("error", "error") if isinstance(response.data, dict) else "error"
        raise SendError(
            f"Slack answered {status} ({error}).", status=status, retry_after=retry_after(response.headers.get("Retry-After"))
        ) from None
    except (SlackClientError, OSError) as exc:
        raise SendError(f"Slack could not be reached ({type(exc).__name__}).") from None
