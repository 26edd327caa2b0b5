"""The org's admin page, composed: the domains each extend it (issues: crypto-shred
deletion; billing: grant credit and correct the balance), and neither may import the
other, so the page that has both actions is put together here, above them."""

from django.contrib import admin

from apps.billing.admin import BillingOrgAdmin
from apps.issues.admin import ShreddingOrgAdmin, shred_orgs
from apps.orgs.models import Org


class RetascOrgAdmin(ShreddingOrgAdmin, BillingOrgAdmin):
    actions = [shred_orgs, "grant_credit", "correct_balance"]


admin.site.unregister(Org)
admin.site.register(Org, RetascOrgAdmin)
