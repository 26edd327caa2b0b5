from django.contrib import admin

from apps.orgs.models import (
    AgentKey,
    CreditGrant,
    Invite,
    Membership,
    OAuthClient,
    OAuthCode,
    OAuthGrant,
    Org,
    Project,
    ProjectAlias,
    SavedFilter,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Org)
class OrgAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "balance_micros", "monthly_cap_micros", "activity_seq", "created_at", "deleted_at"]
    search_fields = ["slug", "name"]
    # The balance moves only through ledger entries (the billing admin's "Grant credit" and
    # "Correct balance" actions), and the cap through the owner's receipts: never typed in.
    readonly_fields = [
        "id",
        "activity_seq",
        "chain_head",
        "balance_micros",
        "monthly_cap_micros",
        "spend_month",
        "spend_month_micros",
        "created_at",
    ]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "org", "role", "status", "created_at"]
    list_filter = ["role", "status"]
    search_fields = ["user__email", "org__slug"]
    raw_id_fields = ["user", "org"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "org", "issue_seq", "created_at"]
    search_fields = ["prefix", "name", "org__slug"]
    readonly_fields = ["issue_seq"]


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin):
    # The secret is never stored; only its hash, which is not shown either.
    list_display = ["prefix", "user", "org", "runtime", "label", "last_used_at", "revoked_at"]
    list_filter = ["runtime", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "label", "user__email", "org__slug"]
    exclude = ["secret_hash"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "parent"]
    raw_id_fields = ["user", "org", "project"]


@admin.register(Invite)
class InviteAdmin(admin.ModelAdmin):
    # The code is stored hashed and never shown; its visible prefix identifies it.
    list_display = ["prefix", "org", "role", "created_by", "created_at", "expires_at", "accepted_by", "revoked_at"]
    list_filter = ["role", ("accepted_at", admin.EmptyFieldListFilter), ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "org__slug", "created_by__email", "accepted_by__email"]
    exclude = ["code_hash"]
    readonly_fields = ["prefix", "created_at", "accepted_at", "accepted_by", "created_by"]
    raw_id_fields = ["org"]


@admin.register(ProjectAlias)
class ProjectAliasAdmin(admin.ModelAdmin):
    list_display = ["prefix", "project", "org", "created_at"]
    search_fields = ["prefix", "org__slug", "project__prefix"]
    raw_id_fields = ["org", "project"]


@admin.register(SavedFilter)
class SavedFilterAdmin(admin.ModelAdmin):
    # The query is sealed (it may hold search words): staff see the name and owner only.
    list_display = ["name", "user", "org", "updated_at"]
    search_fields = ["name", "user__email", "org__slug"]
    raw_id_fields = ["user", "org"]
    fields = ["name", "user", "org"]
    readonly_fields = ["name", "user", "org"]


@admin.register(OAuthClient)
class OAuthClientAdmin(admin.ModelAdmin):
    # Registered by MCP clients themselves (dynamic client registration); no secret is stored.
    list_display = ["name", "client_id", "created_at"]
    search_fields = ["name", "client_id"]
    readonly_fields = ["client_id", "redirect_uris", "metadata", "created_at"]


@admin.register(OAuthGrant)
class OAuthGrantAdmin(admin.ModelAdmin):
    # The refresh token's hash is not shown; revoke the key to end a grant.
    list_display = ["client", "key", "created_at", "refreshed_at"]
    exclude = ["refresh_hash"]
    readonly_fields = ["client", "key", "scopes", "resource", "created_at", "refreshed_at"]


@admin.register(OAuthCode)
class OAuthCodeAdmin(admin.ModelAdmin):
    list_display = ["client", "user", "org", "project", "created_at", "expires_at", "used_at"]
    exclude = ["code_hash", "code_challenge"]
    readonly_fields = ["client", "user", "org", "project", "redirect_uri", "created_at", "expires_at", "used_at"]


@admin.register(CreditGrant)
class CreditGrantAdmin(admin.ModelAdmin):
    # One row per address that received the new-org credit; it is what makes it once.
    list_display = ["email", "org", "micros", "created_at"]
    search_fields = ["email"]
    readonly_fields = ["email", "user", "org", "micros", "created_at"]
