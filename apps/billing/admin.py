"""Billing in the admin: prices, the ledger (read-only), and staff credit.

Staff add or take back credit only through the org list's actions "Grant credit" and
"Correct balance": each writes a ledger entry and a receipt naming the staff user and
the reason (``apps.billing.services``). The balance itself is read-only everywhere.
"""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.template.response import TemplateResponse

from apps.billing import pricing, services
from apps.billing.models import LedgerEntry, Price, RuntimeUsage, StripeEvent, TopUp
from apps.core.errors import ServiceError
from apps.orgs.admin import OrgAdmin
from apps.orgs.models import Org

MICROS = Decimal(1_000_000)


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ["tier", "amount_micros", "updated_at"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        pricing.invalidate()


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "org", "action", "tier", "amount_micros", "balance_after_micros", "key", "principal", "note"]
    list_filter = ["tier", "action"]
    search_fields = ["org__slug", "action", "note"]


@admin.register(TopUp)
class TopUpAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "org", "session_id", "amount_micros", "refunded_micros"]
    search_fields = ["org__slug", "session_id", "payment_intent"]


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "event_id", "type", "org", "amount_micros"]
    search_fields = ["event_id", "org__slug"]


class CreditForm(forms.Form):
    amount = forms.DecimalField(
        label="Amount (USD)", max_digits=13, decimal_places=6, help_text="Dollars, up to six decimals (micro-dollars)."
    )
    reason = forms.CharField(max_length=200, help_text="Shown in the org's ledger and kept in its receipts.")

    def __init__(self, *args, negative_allowed: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.negative_allowed = negative_allowed
        if negative_allowed:
            self.fields["amount"].help_text = "Positive adds credit, negative takes it back. " + self.fields["amount"].help_text

    def clean_amount(self):
        amount = self.cleaned_data["amount"]
        if amount == 0 or (amount < 0 and not self.negative_allowed):
            raise forms.ValidationError("Enter a positive amount." if not self.negative_allowed else "Enter a non-zero amount.")
        return int(amount * MICROS)


def _credit_action(modeladmin, request, queryset, *, title: str, correct: bool):
    """An action with an intermediate form: amount and reason, then one entry per org."""
    applying = "apply" in request.POST
    form = CreditForm(request.POST if applying else None, negative_allowed=correct)
    if applying and form.is_valid():
        amount, reason = form.cleaned_data["amount"], form.cleaned_data["reason"]
        done = []
        for org in queryset.order_by("pk"):
            try:
                if correct:
                    balance = services.credit_correct(org=org, amount_micros=amount, reason=reason, principal_id=request.user.pk)
                else:
                    balance = services.credit_grant(org=org, amount_micros=amount, note=reason, principal_id=request.user.pk)
            except ServiceError as exc:
                modeladmin.message_user(request, f"{org.slug}: {exc.message}", messages.ERROR)
                continue
            done.append(f"{org.slug} (balance now ${Decimal(balance) / MICROS:,.2f})")
        if done:
            modeladmin.message_user(request, f"{title}: {', '.join(done)}.", messages.SUCCESS)
        return None
    return TemplateResponse(
        request,
        "admin/billing/credit_form.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "orgs": queryset.order_by("pk"),
            "form": form,
            "action": request.POST.get("action"),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "opts": modeladmin.model._meta,
        },
    )


admin.site.unregister(Org)


@admin.register(Org)
class BillingOrgAdmin(OrgAdmin):
    """The org admin with the staff credit actions (billing stands above orgs)."""

    actions = ["grant_credit", "correct_balance"]

    @admin.action(description="Grant credit", permissions=["change"])
    def grant_credit(self, request, queryset):
        return _credit_action(self, request, queryset, title="Grant credit", correct=False)

    @admin.action(description="Correct balance", permissions=["change"])
    def correct_balance(self, request, queryset):
        return _credit_action(self, request, queryset, title="Correct balance", correct=True)


@admin.register(RuntimeUsage)
class RuntimeUsageAdmin(admin.ModelAdmin):
    # Reported by agents' runtimes (retasc usage push); counts only, read-only for staff.
    list_display = ["day", "runtime", "model", "key", "principal", "input_tokens", "output_tokens", "sessions"]
    list_filter = ["runtime"]
    search_fields = ["runtime", "model", "principal__email"]

    def has_change_permission(self, request, obj=None):
        return False
