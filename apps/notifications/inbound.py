"""Inbound calls from the chat providers: signature checks, binding, and chat intents.

The interface (``apps.hooks``) reads the raw request, asks here whether it is genuine,
and hands over (channel, sender, text); the answer is the reply text, which the
interface puts in its HTTP answer (each provider shows a webhook's answer to the sender).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.utils.translation import gettext_noop

from apps.core.errors import ServiceError
from apps.notifications import intents, services, texts
from apps.notifications.models import Channel, MemberLanguage

SLACK_TOLERANCE = 300  # seconds: older signed requests are replays


def slack_genuine(channel: Channel, headers, body: bytes, *, now: float | None = None) -> bool:
    """Slack's signing secret, version v0, and a timestamp within 5 minutes."""
    stamp = headers.get("X-Slack-Request-Timestamp", "")
    given = headers.get("X-Slack-Signature", "")
    if not stamp.isdigit() or abs((now or time.time()) - int(stamp)) > SLACK_TOLERANCE or not channel.secret:
        return False
    base = b"v0:" + stamp.encode() + b":" + body
    expected = "v0=" + hmac.new(channel.secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), given.encode())


def discord_genuine(channel: Channel, headers, body: bytes) -> bool:
    """Ed25519 over timestamp + body with the application's public key."""
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(channel.public_key))
        signature = bytes.fromhex(headers.get("X-Signature-Ed25519", ""))
        key.verify(signature, headers.get("X-Signature-Timestamp", "").encode() + body)
    except (ValueError, InvalidSignature):
        return False
    return True


def telegram_genuine(channel: Channel, headers) -> bool:
    given = headers.get("X-Telegram-Bot-Api-Secret-Token", "")
    return bool(channel.secret) and hmac.compare_digest(given.encode(), channel.secret.encode())


# "/start CODE" (Telegram, also "/start@the_bot CODE" in a group), "connect CODE" (Slack, Discord).
_CONNECT = re.compile(r"^\s*(?:/start(?:@\w+)?|/?connect)\s+(\S+)\s*$", re.IGNORECASE)


def message(*, channel: Channel, sender: str, text: str, label: str = "") -> str:
    """A message from ``sender`` (a chat or user id on that provider): bind, or act as its member."""
    connect = _CONNECT.match(text or "")
    if connect:
        try:
            binding = services.binding_redeem(channel=channel, code=connect.group(1), target=sender, label=label)
        except ServiceError as exc:
            return exc.message
        language = MemberLanguage.objects.filter(user_id=binding.user_id).values_list("language", flat=True).first()
        return texts.say(language or "en", gettext_noop("Connected: Retasc will message you here."))
    binding = services.binding_for(channel=channel, target=sender)
    if binding is None:
        return "This chat is not connected to Retasc. Get a code in the Dash (Notifications) and send: connect CODE"
    return intents.handle(binding=binding, text=text or "")
