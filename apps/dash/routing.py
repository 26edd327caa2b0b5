"""The websocket side of the Dash, mounted by retasc/asgi.py under ``websocket``."""

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from apps.dash.consumers import OrgEventsConsumer

websocket_urlpatterns = [path("ws/org/", OrgEventsConsumer.as_asgi())]

# Session cookie auth; Origin must be one of ALLOWED_HOSTS (no cross-site socket hijack).
websocket_application = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
