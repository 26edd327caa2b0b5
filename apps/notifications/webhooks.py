"""Outgoing org webhooks: Standard Webhooks signing, the address check, and the POST.

Signing (https://www.standardwebhooks.com): the secret is ``whsec_`` + base64 of the key;
``webhook-signature`` is ``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
tests/notifications/test_webhooks.py checks it against the specification's test vector.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import socket
import time
from urllib.parse import urlsplit

import httpx2
from django.conf import settings

from apps.core.errors import ServiceError, invalid
from apps.notifications.providers import SendError, retry_after

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()


def verify(secret: str, headers: dict, body: bytes, *, tolerance: int = 300, now: float | None = None) -> bool:
    """A receiver's check (used by the tests' receiver): any v1 signature matches, timestamp fresh."""
    msg_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
    if not msg_id or not stamp.isdigit() or abs((now or time.time()) - int(stamp)) > tolerance:
        return False
    expected = sign(secret, msg_id, int(stamp), body).encode()
    return any(hmac.compare_digest(expected, part.encode()) for part in headers.get("webhook-signature", "").split())


def _blocked(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast or ip.is_unspecified


def check_url(url: str) -> str:
    """Refuse a URL that is not http(s) or resolves to a loopback or private address."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid("url", "The webhook URL must be an http:// or https:// URL with a host.")
    if settings.RETASC_WEBHOOK_ALLOW_PRIVATE:
        return url
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except OSError:
        raise invalid("url", f"The webhook host {parts.hostname!r} does not resolve.") from None
    if any(_blocked(info[4][0]) for info in infos):
        raise invalid("url", "The webhook URL resolves to a loopback or private address, which this server does not call.")
    return url


def post(*, url: str, secret: str, msg_id: str, body: bytes) -> int:
    """POST one signed delivery. Answers the receiver's status; raises SendError to retry."""
    try:
        check_url(url)  # again at send time: the name may resolve elsewhere now
    except ServiceError as exc:
        raise SendError(exc.message) from None
    stamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(secret, msg_id, stamp, body),
        "user-agent": "Retasc-Webhooks",
    }
    try:
        response = httpx2.post(url, content=body, headers=headers, timeout=settings.RETASC_NOTIFY_TIMEOUT_SECONDS)
    except httpx2.HTTPError as exc:
        raise SendError(f"The receiver could not be reached ({type(exc).__name__}).") from None
    if response.status_code >= 300:
        wait = retry_after(response.headers.get("Retry-After")) if response.status_code == 429 else None
        raise SendError(f"The receiver answered {response.status_code}.", status=response.status_code, retry_after=wait)
    return response.status_code
