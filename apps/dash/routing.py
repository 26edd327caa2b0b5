"""The websocket side of the Dash, mounted by retasc/asgi.py under ``websocket``."""

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from django.urls import path

from apps.dash.consumers import OrgEventsConsumer
from apps.dash.origin import SameOriginValidator

websocket_urlpatterns = [path("ws/org/", OrgEventsConsumer.as_asgi())]

# Session cookie auth; the Origin must be this site, port included (no cross-site or
# cross-port socket hijack; apps.dash.origin).
websocket_application = SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
