from django.contrib import admin
from django.template.response import TemplateResponse

from apps.core.unit import mutation
from apps.issues.models import Activity, Attachment, Checkpoint, Claim, Comment, Issue, Label, Relation, SearchTerm
from apps.issues.services import org_delete
from apps.orgs.actor import Actor
from apps.orgs.admin import OrgAdmin
from apps.orgs.models import Org

# Content is encrypted; the admin shows metadata only, never ciphertext or plaintext.
_SEALED = ["title_enc", "body_enc", "acceptance_enc", "evidence_enc", "cancel_reason_enc", "no_dependency_enc"]


@admin.action(description="Reveal content (records a content_revealed receipt)", permissions=["view"])
def reveal_content(modeladmin, request, queryset):
    """Staff see titles and bodies only through this action, and each reveal is itself a
    receipt in the org's chain (verb ``content_revealed``, runtime ``admin``)."""

    issues = list(queryset.select_related("org", "project").order_by("org_id", "project__prefix", "number")[:50])
    by_org: dict = {}
    for issue in issues:
        by_org.setdefault(issue.org_id, []).append(issue)
    for org_issues in by_org.values():
        actor = Actor(org=org_issues[0].org, principal_id=request.user.pk, key=None, runtime="admin")
        with mutation(actor, "content_revealed", charge=False) as unit:
            for issue in org_issues:
                unit.record("content_revealed", issue=issue, changes={"revealedTo": [None, request.user.get_username()]})
    rows = [{"issue": i, "title": i.title, "body": i.body or "", "acceptance": i.acceptance or []} for i in issues]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Revealed content",
        "rows": rows,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/issues/reveal_content.html", context)


@admin.register(Issue)
class IssueAdmin(admin.ModelAdmin):
    actions = [reveal_content]
    list_display = [
        "__str__",
        "org",
        "status",
        "priority",
        "effective_rank",
        "work",
        "assignee",
        "lease_expires_at",
        "reclaim_count",
        "created_at",
    ]
    list_filter = ["status", "work", "priority", "awaiting_triage", "source"]
    search_fields = ["org__slug", "project__prefix", "source_ref"]
    list_select_related = ["project", "org", "assignee"]
    exclude = _SEALED
    readonly_fields = [
        "id",
        "base_rank",
        "effective_rank",
        "dispatch_rank",
        "sla_next_at",
        "lease_claim_id",
        "lease_principal_id",
        "lease_expires_at",
        "reclaim_count",
        "created_at",
        "updated_at",
        "closed_at",
        "checkpoint",
    ]
    raw_id_fields = ["org", "project", "assignee", "author", "author_key", "submitted_by", "parent"]


@admin.register(Relation)
class RelationAdmin(admin.ModelAdmin):
    list_display = ["source", "type", "target", "created_at"]
    list_filter = ["type"]
    raw_id_fields = ["source", "target", "org"]


@admin.register(Label)
class LabelAdmin(admin.ModelAdmin):
    list_display = ["name", "org", "color"]
    search_fields = ["name", "org__slug"]


@admin.register(Comment)
class CommentAdmin(admin.ModelAdmin):
    list_display = ["id", "issue", "author", "runtime", "created_at", "retracted_at"]
    exclude = ["body_enc", "retract_note_enc"]
    raw_id_fields = ["issue", "author", "key", "org", "retracted_by"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Attachment)
class AttachmentAdmin(admin.ModelAdmin):
    list_display = ["id", "issue", "created_by", "created_at", "obsolete_at"]
    exclude = ["url_enc", "title_enc", "obsolete_reason_enc"]
    raw_id_fields = ["issue", "created_by", "key", "org"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["id", "issue", "author", "runtime", "created_at"]
    exclude = ["note_enc"]
    raw_id_fields = ["issue", "author", "key", "org"]


@admin.register(Activity)
class ActivityAdmin(admin.ModelAdmin):
    list_display = ["org", "seq", "verb", "runtime", "principal", "created_at"]
    list_filter = ["verb", "runtime"]
    search_fields = ["org__slug", "verb"]
    exclude = ["changes_enc"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name != "changes_enc"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin):
    list_display = ["id", "issue", "principal", "key", "kind", "created_at", "expires_at", "ended_at", "end_reason"]
    list_filter = ["kind", "end_reason"]
    exclude = ["token_hash"]
    raw_id_fields = ["issue", "principal", "key", "org"]
    readonly_fields = ["created_at", "expires_at", "last_heartbeat_at", "ended_at", "end_reason"]


# --- deleting an org (crypto-shred), for staff ------------------------------------------
# The org admin lives in apps.orgs, which cannot reach org_delete (it needs the issues it
# deletes); so the org admin is completed here, one layer up.


@admin.action(description="Delete org and crypto-shred its content (typed confirmation)", permissions=["change"])
def shred_orgs(modeladmin, request, queryset):
    """Staff delete orgs for good: each org's data key is destroyed after commit. The
    first POST shows what will go and asks to type the slugs; the second deletes."""
    orgs = list(queryset.order_by("slug"))
    expected = " ".join(o.slug for o in orgs)
    typed = " ".join((request.POST.get("confirm") or "").split())
    if request.POST.get("shred") and typed == expected:
        for org in orgs:
            org_delete(org=org)
        modeladmin.message_user(request, f"Deleted and crypto-shredded: {expected}.")
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Delete orgs and crypto-shred their content",
        "orgs": orgs,
        "expected": expected,
        "wrong": bool(request.POST.get("shred")),
        "opts": modeladmin.model._meta,
        "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/orgs/shred_confirm.html", context)


class ShreddingOrgAdmin(OrgAdmin):
    actions = [shred_orgs]

    def has_delete_permission(self, request, obj=None):
        # A plain delete would leave the data key behind: only the shred action deletes.
        return False


admin.site.unregister(Org)
admin.site.register(Org, ShreddingOrgAdmin)


@admin.register(SearchTerm)
class SearchTermAdmin(admin.ModelAdmin):
    # Keyed terms (HMACs) of issue text; nothing readable to show, nothing to edit.
    list_display = ["issue", "org"]
    exclude = ["term"]
    raw_id_fields = ["issue", "org"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
