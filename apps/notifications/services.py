"""Writes of notifications: channels, binding codes and bindings, mutes, webhooks, tests.

Every refusal is a ``ServiceError`` with a stable code, raised before anything is
written. Provider calls (Telegram's webhook registration) happen outside any
transaction, before the channel row is written: a provider that refuses leaves nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import timedelta

from allauth.account.models import EmailAddress
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone, translation

from apps.core import keystore
from apps.core.errors import ServiceError, invalid, not_found
from apps.notifications import telegram, webhooks
from apps.notifications.events import wake
from apps.notifications.models import (
    EVENT_KINDS,
    TEST_KIND,
    Binding,
    BindingCode,
    Channel,
    Delivery,
    MemberLanguage,
    Mute,
    Outbox,
    Webhook,
)
from apps.notifications.providers import SendError
from apps.orgs.actor import Actor

CODE_TTL = timedelta(minutes=10)
CODE_PREFIX = "rtscbind_"
PROVIDERS = tuple(Channel.Provider.values)


def _id(value, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise not_found(what) from None


def _owner(actor: Actor) -> None:
    if actor.is_agent or not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner manages notification channels and webhooks.")


def _human(actor: Actor) -> None:
    if actor.is_agent or actor.principal_id is None:
        raise ServiceError("FORBIDDEN", "Bindings belong to people: sign in or use a personal token.")


def target_hash(org_id, target: str) -> str:
    """Keyed hash of an external id (a chat id, a user id), to find its binding."""
    return hmac.new(keystore.data_key(str(org_id)), f"binding:{target}".encode(), hashlib.sha256).hexdigest()


def code_hash(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()


def webhook_url(channel: Channel) -> str:
    return f"{settings.PUBLIC_URL}/hooks/{channel.kind}/{channel.pk}"


# --- channels -------------------------------------------------------------------------------


def channel_create(*, actor: Actor, kind, bot_token=None, signing_secret=None, public_key=None) -> Channel:
    """Add an org channel (owner). Telegram's webhook is registered with a fresh secret token."""
    _owner(actor)
    if kind not in PROVIDERS:
        raise invalid("kind", f"kind is one of {', '.join(PROVIDERS)}.")
    bot_token = (bot_token or "").strip() or None
    if kind != Channel.Provider.EMAIL and not bot_token:
        raise invalid("botToken", f"A {kind} channel needs the bot's token.")
    secret = None
    if kind == Channel.Provider.SLACK:
        secret = (signing_secret or "").strip()
        if not secret:
            raise invalid("signingSecret", "A Slack channel needs the app's signing secret.")
    if kind == Channel.Provider.DISCORD:
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex((public_key or "").strip()))
        except ValueError:
            raise invalid("publicKey", "A Discord channel needs the application's public key (64 hex digits).") from None
    channel = Channel(org_id=actor.org.pk, kind=kind, public_key=(public_key or "").strip(), created_by_id=actor.principal_id)
    if kind == Channel.Provider.TELEGRAM:
        secret = secrets.token_urlsafe(32)
        try:
            telegram.set_webhook(token=bot_token, url=webhook_url(channel), secret_token=secret)
        except SendError as exc:
            raise ServiceError("UNAVAILABLE", f"Telegram refused the webhook registration: {exc.message}") from None
    channel.bot_token = bot_token
    channel.secret = secret
    channel.save(force_insert=True)
    return channel


def channel_remove(*, actor: Actor, channel_id) -> None:
    _owner(actor)
    if not Channel.objects.filter(pk=_id(channel_id, "The channel"), org_id=actor.org.pk, removed_at__isnull=True).update(
        removed_at=timezone.now()
    ):
        raise not_found("The channel")


def channel_get(*, org_id, channel_id, live: bool = True) -> Channel:
    channel = Channel.objects.filter(pk=_id(channel_id, "The channel"), org_id=org_id).first()
    if channel is None or (live and channel.removed_at is not None):
        raise not_found("The channel")
    return channel


def channel_send_test(*, actor: Actor, channel_id) -> int:
    """Queue a test message to the caller's own bindings on this channel. Answers how many."""
    channel = channel_get(org_id=actor.org.pk, channel_id=channel_id)
    _human(actor)
    live = Binding.objects.filter(channel=channel, user_id=actor.principal_id, removed_at__isnull=True).count()
    if live == 0:
        raise ServiceError("CONFLICT", "Bind yourself to this channel first; the test goes to your own chat.")
    with transaction.atomic():
        row = Outbox(org_id=actor.org.pk, user_id=actor.principal_id, kind=TEST_KIND, channel=channel)
        row.payload = {}
        row.save(force_insert=True)
        _wake()
    return live


# --- bindings ---------------------------------------------------------------------------


def binding_code_create(*, actor: Actor, channel_id) -> tuple[str, object]:
    """A single-use code (10 minutes) the member sends to the bot. Answers (code, expiresAt)."""
    _human(actor)
    channel = channel_get(org_id=actor.org.pk, channel_id=channel_id)
    if channel.kind == Channel.Provider.EMAIL:
        raise invalid("channelId", "E-mail needs no code: bind your verified address instead.")
    code = CODE_PREFIX + secrets.token_urlsafe(9)
    expires = timezone.now() + CODE_TTL
    BindingCode.objects.create(
        code_hash=code_hash(code), org_id=actor.org.pk, channel=channel, user_id=actor.principal_id, expires_at=expires
    )
    _remember_language(actor.principal_id)
    return code, expires


def _remember_language(user_id) -> None:
    language = translation.get_language() or "en"
    MemberLanguage.objects.update_or_create(user_id=user_id, defaults={"language": language})


def binding_redeem(*, channel: Channel, code: str, target: str, label: str = "") -> Binding:
    """Bind the chat that sent ``code`` to the code's member. Single use: one redeem wins."""
    now = timezone.now()
    with transaction.atomic():
        row = BindingCode.objects.select_for_update().filter(code_hash=code_hash(code), channel=channel).first()
        if row is None or row.used_at is not None or row.expires_at <= now:
            raise ServiceError("INVALID_ARGUMENT", "That code is unknown, used or expired; ask the Dash for a new one.")
        BindingCode.objects.filter(pk=row.pk).update(used_at=now)
        digest = target_hash(channel.org_id, target)
        Binding.objects.filter(channel=channel, target_hash=digest, removed_at__isnull=True).update(removed_at=now)
        binding = Binding(org_id=channel.org_id, channel=channel, user_id=row.user_id, target_hash=digest, label=label[:120])
        binding.target = target
        binding.save(force_insert=True)
    return binding


def binding_email(*, actor: Actor, channel_id) -> Binding:
    """Bind the member's verified e-mail address to the org's e-mail channel."""
    _human(actor)
    channel = channel_get(org_id=actor.org.pk, channel_id=channel_id)
    if channel.kind != Channel.Provider.EMAIL:
        raise invalid("channelId", "Only an e-mail channel binds an address; chat channels take a code.")
    address = EmailAddress.objects.filter(user_id=actor.principal_id, verified=True, primary=True).first()
    address = address or EmailAddress.objects.filter(user_id=actor.principal_id, verified=True).first()
    if address is None:
        raise ServiceError("FORBIDDEN", "Verify your e-mail address first.")
    digest = target_hash(actor.org.pk, address.email.lower())
    existing = Binding.objects.filter(channel=channel, target_hash=digest, removed_at__isnull=True).first()
    if existing is not None:
        return existing
    binding = Binding(org_id=actor.org.pk, channel=channel, user_id=actor.principal_id, target_hash=digest, label=address.email)
    binding.target = address.email
    try:
        with transaction.atomic():
            binding.save(force_insert=True)
    except IntegrityError:
        return Binding.objects.get(channel=channel, target_hash=digest, removed_at__isnull=True)
    _remember_language(actor.principal_id)
    return binding


def binding_remove(*, actor: Actor, binding_id) -> None:
    _human(actor)
    removed = Binding.objects.filter(
        pk=_id(binding_id, "The binding"), org_id=actor.org.pk, user_id=actor.principal_id, removed_at__isnull=True
    ).update(removed_at=timezone.now())
    if not removed:
        raise not_found("The binding")


def binding_for(*, channel: Channel, target: str) -> Binding | None:
    return (
        Binding.objects.select_related("channel")
        .filter(channel=channel, target_hash=target_hash(channel.org_id, target), removed_at__isnull=True)
        .first()
    )


# --- mutes --------------------------------------------------------------------------------


def mute_set(*, org_id, user_id, kind: str, muted: bool) -> bool:
    """Mute or unmute one kind for one member. Answers whether anything changed."""
    if kind not in EVENT_KINDS:
        raise invalid("kind", f"kind is one of {', '.join(EVENT_KINDS)}.")
    if muted:
        _, created = Mute.objects.get_or_create(org_id=org_id, user_id=user_id, kind=kind)
        return created
    return Mute.objects.filter(org_id=org_id, user_id=user_id, kind=kind).delete()[0] > 0


# --- outgoing webhooks ----------------------------------------------------------------------


def webhook_create(*, actor: Actor, url, events) -> tuple[Webhook, str]:
    """Register an outgoing webhook (owner). Answers (webhook, secret); the secret is shown once."""
    _owner(actor)
    if not isinstance(url, str):
        raise invalid("url", "url is required.")
    webhooks.check_url(url.strip())
    if not isinstance(events, list) or not events or any(e not in EVENT_KINDS for e in events):
        raise invalid("events", f"events is a non-empty list of {', '.join(EVENT_KINDS)}.")
    secret = webhooks.new_secret()
    hook = Webhook(org_id=actor.org.pk, events=sorted(set(events)), created_by_id=actor.principal_id)
    hook.url = url.strip()
    hook.secret = secret
    hook.save(force_insert=True)
    return hook, secret


def webhook_remove(*, actor: Actor, webhook_id) -> None:
    _owner(actor)
    if not Webhook.objects.filter(pk=_id(webhook_id, "The webhook"), org_id=actor.org.pk, removed_at__isnull=True).update(
        removed_at=timezone.now()
    ):
        raise not_found("The webhook")


def delivery_retry(*, actor: Actor, delivery_id) -> None:
    """Retry a dead letter, or redeliver a webhook delivery (owner)."""
    _owner(actor)
    now = timezone.now()
    # A chat message is sent again only when it died; a webhook delivery also when it was
    # sent or skipped (a redeliver keeps its webhook-id, so the receiver can tell).
    finished = Q(status=Delivery.Status.DEAD) | Q(
        webhook__isnull=False, status__in=(Delivery.Status.SENT, Delivery.Status.SKIPPED)
    )
    retried = Delivery.objects.filter(finished, pk=_id(delivery_id, "A finished delivery"), org_id=actor.org.pk).update(
        status=Delivery.Status.PENDING, next_attempt_at=now, window_start=now, last_error="", lease_until=None
    )
    if not retried:
        raise not_found("A finished delivery")
    wake()


def _wake() -> None:
    transaction.on_commit(wake)  # runs at once outside a transaction
