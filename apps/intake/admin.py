from django.contrib import admin

from apps.intake.models import Connector, Delivery, SourceIssue, WritebackJob


@admin.register(Connector)
class ConnectorAdmin(admin.ModelAdmin):
    # The webhook secret and the provider token are sealed and never shown.
    list_display = ["repo", "provider", "org", "project", "live", "last_delivery_at", "deliveries_count", "revoked_at"]
    list_filter = ["provider", "live", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["repo", "org__slug"]
    exclude = ["secret_enc", "token_enc"]
    readonly_fields = ["id", "org", "project", "provider", "repo", "created_by", "created_at", "last_delivery_at"]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["delivery_id", "connector", "event", "action", "outcome", "issue", "received_at"]
    list_filter = ["outcome", "event"]
    search_fields = ["delivery_id", "issue"]
    raw_id_fields = ["connector", "org"]


@admin.register(SourceIssue)
class SourceIssueAdmin(admin.ModelAdmin):
    list_display = ["connector", "number", "upstream_id", "issue", "upstream_open"]
    raw_id_fields = ["connector", "org", "issue"]


@admin.register(WritebackJob)
class WritebackJobAdmin(admin.ModelAdmin):
    list_display = ["identifier", "connector", "reason", "state", "attempts", "next_attempt_at", "last_error"]
    list_filter = ["state"]
    raw_id_fields = ["connector", "org", "source"]
