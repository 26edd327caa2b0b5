from django.contrib import admin

from apps.leases.models import Claim


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin):
    list_display = ["id", "issue", "principal", "key", "kind", "created_at", "expires_at", "ended_at", "end_reason"]
    list_filter = ["kind", "end_reason"]
    exclude = ["token_hash"]
    raw_id_fields = ["issue", "principal", "key", "org"]
    readonly_fields = ["created_at", "expires_at", "last_heartbeat_at", "ended_at", "end_reason"]
