from django.contrib import admin
from django.http import JsonResponse
from django.urls import path

from retasc.health import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/health", health, name="health"),
]


def _not_found(request, exception=None):
    return JsonResponse({"code": "NOT_FOUND", "message": "No such page."}, status=404)


handler404 = _not_found
