from django.contrib import admin

from apps.billing import pricing
from apps.billing.models import LedgerEntry, Price, RuntimeUsage


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ["tier", "amount_micros", "updated_at"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        pricing.invalidate()


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "org", "action", "tier", "amount_micros", "balance_after_micros", "key", "principal"]
    list_filter = ["tier", "action"]
    search_fields = ["org__slug", "action"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(RuntimeUsage)
class RuntimeUsageAdmin(admin.ModelAdmin):
    # Reported by agents' runtimes (retasc usage push); counts only, read-only for staff.
    list_display = ["day", "runtime", "model", "key", "principal", "input_tokens", "output_tokens", "sessions"]
    list_filter = ["runtime"]
    search_fields = ["runtime", "model", "principal__email"]

    def has_change_permission(self, request, obj=None):
        return False
