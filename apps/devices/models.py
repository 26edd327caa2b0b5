"""Device authorization (RFC 8628 style) for the ``retasc`` CLI, and personal CLI tokens.

Neither secret is stored: a device code and a personal token are kept as SHA-256 hashes,
the raw values are shown once (the device code to the CLI that asked, the token to the
CLI that polled after a human approved).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class DeviceAuthorization(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"

    device_code_hash = models.CharField(max_length=64, unique=True)
    user_code = models.CharField(max_length=8, help_text="Eight letters, shown as ABCD-EFGH.")
    client_name = models.CharField(max_length=120, help_text="What is asking, as the CLI describes itself.")
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    interval = models.PositiveSmallIntegerField(default=5, help_text="Seconds the CLI waits between polls.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    token = models.ForeignKey("devices.PersonalToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    last_polled_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True, help_text="When the token was handed to the CLI (once).")

    class Meta:
        indexes = [models.Index(fields=["user_code"], condition=Q(status="pending"), name="device_pending_code")]

    def __str__(self) -> str:
        return f"{self.user_code[:4]}-{self.user_code[4:]} ({self.status})"


class PersonalTokenQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True)


class PersonalToken(models.Model):
    """A human's CLI credential (``rtscpat_…``). It acts as that human, like a session."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens")
    label = models.CharField(max_length=120, blank=True)
    prefix = models.CharField(max_length=20, help_text="Visible start of the token, e.g. rtscpat_ab12cd34.")
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = PersonalTokenQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.label})"
