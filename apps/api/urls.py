from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from apps.api import views
from apps.api.errors import api_not_found

app_name = "api"

urlpatterns = [
    *[
        path(f"v1/{route}", views.build_view(name, route, methods).as_view(), name=name)
        for route, (name, methods) in views.ROUTES.items()
    ],
    path("v1/attachments/<str:attachment>/file", views.AttachmentFile.as_view(), name="AttachmentFile"),
    path("v1/uploads/<str:token>", views.Upload.as_view(), name="Upload"),
    path("v1/usage/reports", views.UsagePush.as_view(), name="UsagePush"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    re_path(r"^.*$", api_not_found),
]
