"""The Dash's URLs plus one that fails, to see the 500 page (tests only)."""

from django.urls import path

from retasc import urls as root_urls


def _boom(request):
    raise RuntimeError("boom: the secret detail of a failure")


urlpatterns = [path("boom/", _boom), *root_urls.urlpatterns]
handler404 = root_urls.handler404
handler500 = root_urls.handler500
