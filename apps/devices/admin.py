from django.contrib import admin

from apps.devices.models import DeviceAuthorization, PersonalToken


@admin.register(PersonalToken)
class PersonalTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "label", "created_at", "last_used_at", "revoked_at")
    search_fields = ("prefix", "user__email", "label")
    readonly_fields = ("prefix", "secret_hash", "created_at", "last_used_at")


@admin.register(DeviceAuthorization)
class DeviceAuthorizationAdmin(admin.ModelAdmin):
    list_display = ("user_code", "client_name", "status", "user", "created_at", "expires_at")
    list_filter = ("status",)
    readonly_fields = ("device_code_hash", "user_code", "created_at", "delivered_at", "token")
