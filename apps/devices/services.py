"""Device authorization for the CLI (``retasc login``) and personal CLI tokens (writes).

The flow (RFC 8628, "OAuth 2.0 Device Authorization Grant", minus OAuth):

1. ``device_start``: the CLI gets a secret device code and a short user code.
2. A signed-in human opens ``/device/``, enters the user code, sees what is asking, and
   approves (``device_approve``) or denies (``device_deny``).
3. ``device_poll``: the CLI polls with its device code. Once approved, the first poll
   mints a personal token (``rtscpat_…``) and hands it over; the device code is then
   used up. Every transition is a conditional UPDATE, so two racing polls (or a poll
   racing a denial) cannot both win.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.core.errors import ServiceError
from apps.devices.models import DeviceAuthorization, PersonalToken

TOKEN_PREFIX = "rtscpat_"
DEVICE_CODE_PREFIX = "rtscdev_"
# Consonants only (RFC 8628 §6.1): no vowels, so no words; no look-alikes (0/O, 1/I).
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LENGTH = 8
DEVICE_CODE_TTL = timedelta(minutes=10)
SLOW_DOWN_STEP = 5  # seconds added to the interval after polling too fast (RFC 8628 §3.5)
_LAST_USED_EVERY = timedelta(seconds=60)

UNAUTHORIZED = ServiceError("UNAUTHORIZED", "Missing, unknown or revoked personal token.")


class DevicePollRefusal(ServiceError):
    """A poll that yields no token yet (or never will). ``http_status`` is the flow's own."""

    STATUS = {"AUTHORIZATION_PENDING": 428, "SLOW_DOWN": 429, "ACCESS_DENIED": 403, "EXPIRED_TOKEN": 410}

    @property
    def http_status(self) -> int:
        return self.STATUS[self.code]


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def user_code_normalize(raw: str) -> str:
    """``abcd-efgh`` / ``ABCD EFGH`` -> ``ABCDEFGH`` (what is stored)."""
    return "".join(ch for ch in str(raw or "").upper() if ch.isalpha())[: USER_CODE_LENGTH * 2]


def user_code_display(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


def device_start(*, client_name: str, client_ip: str | None = None) -> tuple[DeviceAuthorization, str]:
    """A new pending authorization; the raw device code is returned once."""
    client_name = " ".join(str(client_name or "").split())[:120] or "retasc CLI"
    raw = DEVICE_CODE_PREFIX + secrets.token_urlsafe(32)
    user_code = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))
    device = DeviceAuthorization.objects.create(
        device_code_hash=_hash(raw),
        user_code=user_code,
        client_name=client_name,
        client_ip=client_ip,
        interval=settings.RETASC_DEVICE_POLL_INTERVAL_SECONDS,
        expires_at=timezone.now() + DEVICE_CODE_TTL,
    )
    return device, raw


def _pending(user_code: str) -> DeviceAuthorization:
    code = user_code_normalize(user_code)
    device = None
    if len(code) == USER_CODE_LENGTH:
        device = (
            DeviceAuthorization.objects.filter(
                user_code=code, status=DeviceAuthorization.Status.PENDING, expires_at__gt=timezone.now()
            )
            .order_by("-created_at")
            .first()
        )
    if device is None:
        raise ServiceError("NOT_FOUND", "That code is not valid or has expired; run retasc login again.")
    return device


def device_lookup(*, user_code: str) -> DeviceAuthorization:
    """The pending, unexpired authorization behind a user code (what the approval page shows)."""
    return _pending(user_code)


def _decide(*, user_code: str, user, status: str) -> DeviceAuthorization:
    device = _pending(user_code)
    now = timezone.now()
    won = DeviceAuthorization.objects.filter(pk=device.pk, status=DeviceAuthorization.Status.PENDING, expires_at__gt=now).update(
        status=status, user=user, decided_at=now
    )
    if won != 1:  # denied, approved or expired in between
        raise ServiceError("NOT_FOUND", "That code is not valid or has expired; run retasc login again.")
    device.refresh_from_db()
    return device


def device_approve(*, user_code: str, user) -> DeviceAuthorization:
    """The signed-in ``user`` lets the CLI act as them."""
    if not user.is_active:
        raise ServiceError("FORBIDDEN", "This account is inactive.")
    return _decide(user_code=user_code, user=user, status=DeviceAuthorization.Status.APPROVED)


def device_deny(*, user_code: str, user) -> DeviceAuthorization:
    return _decide(user_code=user_code, user=user, status=DeviceAuthorization.Status.DENIED)


def device_poll(*, device_code: str) -> tuple[PersonalToken, str]:
    """The CLI's poll. Returns ``(token, raw)`` exactly once after approval; otherwise
    raises ``DevicePollRefusal`` with AUTHORIZATION_PENDING, SLOW_DOWN, ACCESS_DENIED or
    EXPIRED_TOKEN (unknown, expired or already used device codes all read as expired)."""
    gone = DevicePollRefusal("EXPIRED_TOKEN", "This sign-in request expired or was already used; run retasc login again.")
    if not isinstance(device_code, str) or not device_code.startswith(DEVICE_CODE_PREFIX) or len(device_code) > 100:
        raise gone
    device = DeviceAuthorization.objects.filter(device_code_hash=_hash(device_code)).first()
    if device is None or device.delivered_at is not None:
        raise gone
    now = timezone.now()
    if device.expires_at <= now:
        DeviceAuthorization.objects.filter(pk=device.pk, status=DeviceAuthorization.Status.PENDING).update(
            status=DeviceAuthorization.Status.EXPIRED
        )
        raise gone
    # Polling faster than the interval (with a little slack for timer jitter) slows the
    # client down; the conditional update makes two concurrent polls count as too fast.
    slack = timedelta(seconds=device.interval * 0.8)
    on_time = (
        DeviceAuthorization.objects.filter(pk=device.pk)
        .filter(Q(last_polled_at__isnull=True) | Q(last_polled_at__lte=now - slack))
        .update(last_polled_at=now)
    )
    if on_time != 1:
        DeviceAuthorization.objects.filter(pk=device.pk).update(interval=F("interval") + SLOW_DOWN_STEP, last_polled_at=now)
        raise DevicePollRefusal(
            "SLOW_DOWN", "Polling too fast; wait longer between polls.", interval=device.interval + SLOW_DOWN_STEP
        )
    if device.status == DeviceAuthorization.Status.PENDING:
        raise DevicePollRefusal("AUTHORIZATION_PENDING", "Waiting for someone to approve this sign-in in the browser.")
    if device.status == DeviceAuthorization.Status.DENIED:
        raise DevicePollRefusal("ACCESS_DENIED", "The sign-in request was denied in the browser.")
    if device.status != DeviceAuthorization.Status.APPROVED:
        raise gone
    with transaction.atomic():
        won = DeviceAuthorization.objects.filter(
            pk=device.pk, status=DeviceAuthorization.Status.APPROVED, delivered_at__isnull=True
        ).update(delivered_at=now)
        if won != 1:
            raise gone
        token, raw = personal_token_mint(user=device.user, label=device.client_name)
        DeviceAuthorization.objects.filter(pk=device.pk).update(token=token)
    return token, raw


# --- personal tokens ---------------------------------------------------------------------


def personal_token_mint(*, user, label: str = "") -> tuple[PersonalToken, str]:
    """A new CLI token for ``user``; the raw secret is returned once and never stored."""
    label = " ".join(str(label or "").split())[:120]
    ident = secrets.token_hex(4)
    raw = f"{TOKEN_PREFIX}{ident}_{secrets.token_urlsafe(32)}"
    token = PersonalToken.objects.create(user=user, label=label, prefix=f"{TOKEN_PREFIX}{ident}", secret_hash=_hash(raw))
    return token, raw


def personal_token_authenticate(raw: str) -> PersonalToken:
    """The live token behind a bearer value. Every failure answers the same UNAUTHORIZED."""
    if not isinstance(raw, str) or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        raise UNAUTHORIZED
    token = PersonalToken.objects.select_related("user").filter(secret_hash=_hash(raw), revoked_at__isnull=True).first()
    if token is None or not token.user.is_active:
        raise UNAUTHORIZED
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _LAST_USED_EVERY:
        PersonalToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def personal_token_revoke(*, token: PersonalToken) -> bool:
    """Revoke a token (``retasc logout``). False when it was already revoked."""
    return PersonalToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) == 1


def personal_tokens_revoke_all(*, user) -> int:
    """Revoke every live personal token of ``user`` (a password reset, a social takeover).
    Returns how many were live."""
    return PersonalToken.objects.filter(user_id=user.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
