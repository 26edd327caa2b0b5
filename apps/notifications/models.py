"""Notifications: org channels, member bindings, mutes, the outbox and its deliveries,
outgoing org webhooks, and single-use approval links.

Flow: an action that a human should hear about writes one ``Outbox`` row per recipient
(or one per org event for webhooks) in the action's own transaction. The worker expands
each outbox row into ``Delivery`` rows (one per binding or webhook, each with its own
idempotency key, so a re-expansion writes nothing twice), then sends the deliveries,
with backoff, until sent or 24 h old (dead). Mutes are read when a delivery is sent.

Tokens, secrets, external chat ids, webhook URLs and message contents are sealed with
the org's data key (SPEC §8): rows carry a UUID primary key set before the first save,
which the ciphertext's associated data binds.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.sealed import Sealed

USER = settings.AUTH_USER_MODEL


class Kind(models.TextChoices):
    """What a member hears about (SPEC §10); also the events a webhook can pick."""

    DONE = "done"
    CANCELED = "canceled"
    REVIEW_REQUESTED = "review_requested"
    ASSIGNED = "assigned"
    SLA_BREACHING = "sla_breaching"


EVENT_KINDS = tuple(Kind.values)
TEST_KIND = "test"


class Channel(models.Model):
    class Provider(models.TextChoices):
        SLACK = "slack"
        DISCORD = "discord"
        TELEGRAM = "telegram"
        EMAIL = "email"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=Provider.choices)
    # Slack: bot token + signing secret; Discord: bot token + public key (not secret);
    # Telegram: bot token + the secret token its webhook calls carry; e-mail: nothing.
    bot_token_enc = models.BinaryField(null=True)
    secret_enc = models.BinaryField(null=True)
    bot_token = Sealed()
    secret = Sealed()
    public_key = models.CharField(max_length=128, blank=True)
    created_by = models.ForeignKey(USER, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind} channel of {self.org_id}"


class Binding(models.Model):
    """A member reachable on a channel: a Slack user, a Discord user, a Telegram chat, an address."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="bindings")
    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="+")
    target_enc = models.BinaryField()
    target = Sealed()
    # Keyed hash of the external id: finds the binding of an inbound message without
    # storing the id in the clear.
    target_hash = models.CharField(max_length=64)
    label = models.CharField(max_length=120, blank=True)  # shown in the Dash (e.g. "@ada")
    created_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "target_hash"], condition=Q(removed_at__isnull=True), name="binding_live_target"
            )
        ]
        indexes = [models.Index(fields=["org", "user"], condition=Q(removed_at__isnull=True), name="binding_live_user")]

    def __str__(self) -> str:
        return f"{self.label or self.pk} on {self.channel_id}"


class BindingCode(models.Model):
    """A single-use code (10 minutes) a member sends to the bot to bind that chat."""

    code_hash = models.CharField(max_length=64, unique=True)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"binding code for {self.user_id}"


class Mute(models.Model):
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "user", "kind"], name="mute_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} mutes {self.kind}"


class Webhook(models.Model):
    """An org's outgoing webhook: a URL, the events it wants, a Standard Webhooks secret."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    url_enc = models.BinaryField()
    secret_enc = models.BinaryField()
    url = Sealed()
    secret = Sealed()
    events = models.JSONField(default=list)
    created_by = models.ForeignKey(USER, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org"], condition=Q(removed_at__isnull=True), name="webhook_live")]

    def __str__(self) -> str:
        return f"webhook {self.pk} ({', '.join(self.events)})"


class Outbox(models.Model):
    """One event for one recipient (``user``), or for the org's webhooks (``user`` empty).

    Written in the action's transaction; expanded into deliveries by the worker.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(USER, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20)
    issue_id = models.UUIDField(null=True, blank=True)
    payload_enc = models.BinaryField()
    payload = Sealed(kind="json")
    # The only deliveries for a "send test" or a single binding (no fan-out).
    channel = models.ForeignKey(Channel, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expanded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["created_at"], condition=Q(expanded_at__isnull=True), name="outbox_unexpanded")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.user_id or 'webhooks'}"


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"  # taken by a worker until lease_until; then pending again
        SENT = "sent"
        DEAD = "dead"
        SKIPPED = "skipped"  # muted, or the binding/channel/webhook is gone

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    outbox = models.ForeignKey(Outbox, on_delete=models.CASCADE, related_name="deliveries")
    binding = models.ForeignKey(Binding, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    webhook = models.ForeignKey(Webhook, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries")
    # Sent with every attempt (header, Discord nonce, webhook-id): receivers drop repeats.
    idempotency_key = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    # The 24 h window to dead starts here (reset by a manual retry or redeliver).
    window_start = models.DateTimeField(default=timezone.now)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"), name="delivery_due"),
            models.Index(fields=["lease_until"], condition=Q(status="sending"), name="delivery_taken"),
            models.Index(fields=["org", "status"], name="delivery_org_status"),
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} ({self.status})"


class PendingIntent(models.Model):
    """A state-changing chat intent waiting for the member's "yes" (10 minutes)."""

    binding = models.OneToOneField(Binding, on_delete=models.CASCADE, related_name="+")
    intent = models.JSONField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.intent.get('name')} by {self.binding_id}"


class ApprovalLink(models.Model):
    """A signed, single-use link that approves one review as one member."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="+")
    issue_id = models.UUIDField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"approval {self.pk}"


class MemberLanguage(models.Model):
    """The language a member reads messages in: the Dash's language when they last bound a chat."""

    user = models.OneToOneField(USER, on_delete=models.CASCADE, related_name="+")
    language = models.CharField(max_length=10, default="en")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"
