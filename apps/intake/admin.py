from django.contrib import admin

from apps.intake.models import Connector, Delivery, ImportedRecord, ImportJob, SourceIssue, WritebackJob


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


@admin.register(ImportJob)
class ImportJobAdmin(admin.ModelAdmin):
    # The upload and a worker's Linear key are sealed and never shown.
    list_display = ["id", "org", "source", "status", "done", "total", "created_at", "finished_at"]
    list_filter = ["source", "status"]
    search_fields = ["org__slug"]
    exclude = ["upload_enc", "secret_enc"]
    raw_id_fields = ["org", "created_by"]
    readonly_fields = [
        "id",
        "org",
        "source",
        "params",
        "counts",
        "errors",
        "checkpoint",
        "created_at",
        "started_at",
        "finished_at",
    ]


@admin.register(ImportedRecord)
class ImportedRecordAdmin(admin.ModelAdmin):
    list_display = ["source", "kind", "external_id", "object_id", "org", "updated_at"]
    list_filter = ["source", "kind"]
    search_fields = ["external_id", "object_id"]
    raw_id_fields = ["org", "job"]
