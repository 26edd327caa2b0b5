from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from apps.api import billing, imports, notifications, views
from apps.api.errors import api_not_found

app_name = "api"

urlpatterns = [
    *[
        path(f"v1/{route}", views.build_view(name, route, methods).as_view(), name=name)
        for route, (name, methods) in views.ROUTES.items()
    ],
    path("v1/billing/cap", billing.Cap.as_view(), name="BillingCap"),
    path("v1/billing/ledger", billing.Ledger.as_view(), name="BillingLedger"),
    path("v1/billing/ledger.csv", billing.LedgerCsv.as_view(), name="BillingLedgerCsv"),
    path("v1/billing/topups", billing.Topups.as_view(), name="BillingTopups"),
    path("v1/attachments/<str:attachment>/file", views.AttachmentFile.as_view(), name="AttachmentFile"),
    path("v1/uploads/<str:token>", views.Upload.as_view(), name="Upload"),
    path("v1/usage/reports", views.UsagePush.as_view(), name="UsagePush"),
    path("v1/notifications/channels", notifications.Channels.as_view(), name="Channels"),
    path("v1/notifications/channels/<str:channel>/test", notifications.ChannelTest.as_view(), name="ChannelTest"),
    path("v1/notifications/webhooks", notifications.Webhooks.as_view(), name="Webhooks"),
    path("v1/notifications/deliveries/<str:delivery>/retry", notifications.DeliveryRetry.as_view(), name="DeliveryRetry"),
    path("v1/me/bindings", notifications.MyBindings.as_view(), name="MyBindings"),
    path("v1/me/bindings/<str:binding>", notifications.MyBinding.as_view(), name="MyBinding"),
    path("v1/imports", imports.Imports.as_view(), name="Imports"),
    path("v1/imports/<str:import_id>", imports.ImportDetail.as_view(), name="ImportDetail"),
    path("v1/members/<str:member_id>/claim", imports.MemberClaim.as_view(), name="MemberClaim"),
    path("v1/members/<str:member_id>/merge", imports.MemberMerge.as_view(), name="MemberMerge"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    re_path(r"^.*$", api_not_found),
]
