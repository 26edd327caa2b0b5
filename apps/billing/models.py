from __future__ import annotations

from django.conf import settings
from django.db import models


class Tier(models.TextChoices):
    DISPATCH = "dispatch"
    WORK = "work"
    BOOKKEEPING = "bookkeeping"
    PLUMBING = "plumbing"
    HEARTBEAT = "heartbeat"


class Price(models.Model):
    """Price per action tier in micro-dollars. Staff edit these in the admin."""

    tier = models.CharField(max_length=20, choices=Tier.choices, unique=True)
    amount_micros = models.PositiveIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.tier}: {self.amount_micros} µ$"


class LedgerEntry(models.Model):
    """One charge (negative amount) or credit (positive amount). Never edited."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="ledger")
    key = models.ForeignKey("orgs.AgentKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    principal = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=40)
    tier = models.CharField(max_length=20)
    amount_micros = models.BigIntegerField()
    balance_after_micros = models.BigIntegerField()
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["org", "created_at"], name="ledger_org_time")]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.action} {self.amount_micros} µ$ ({self.org_id})"


class RuntimeUsage(models.Model):
    """What an agent runtime reported it used, per key, runtime, day and model.

    Counts only: tokens in and out, cache reads, sessions and messages. No prompt or answer
    text ever reaches the server. A report replaces the day's row (the CLI sends whole-day
    totals, deduplicated by message id), so pushing twice never counts twice.
    """

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    key = models.ForeignKey("orgs.AgentKey", on_delete=models.CASCADE, related_name="usage")
    principal = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    runtime = models.CharField(max_length=40)
    day = models.DateField()
    model = models.CharField(max_length=100, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    sessions = models.PositiveIntegerField(default=0)
    messages = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "runtime", "day", "model"], name="runtime_usage_unique")]
        indexes = [models.Index(fields=["org", "day"], name="runtime_usage_org_day")]

    def __str__(self) -> str:
        return f"{self.runtime} {self.day} {self.model} ({self.key_id})"
