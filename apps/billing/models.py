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
