"""ASGI entry point: Django first, then the protocol routers (see STYLE.md §12)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retasc.settings.base")

from django.core.exceptions import ImproperlyConfigured  # noqa: E402

from apps.core.handler import get_asgi_application  # noqa: E402

try:
    # Django's handler, with each request's middleware and view run in one thread hop.
    django_app = get_asgi_application()
except ImproperlyConfigured as exc:
    # A bad setting (or a wrong master key) is one clear sentence, not a traceback.
    raise SystemExit(f"retasc: configuration error: {exc}") from None

from channels.routing import ProtocolTypeRouter  # noqa: E402

from apps.core.keystore import check_master_key  # noqa: E402

check_master_key()  # a wrong master key stops start-up with one sentence

from retasc.jobs import start_inprocess_jobs  # noqa: E402

start_inprocess_jobs()

from django.conf import settings  # noqa: E402

from apps.core import daphne_cap  # noqa: E402
from apps.core.bodycap import BodyCap  # noqa: E402
from apps.core.graceful import GracefulHTTP  # noqa: E402
from apps.mcp.asgi import mcp_application, route_mcp  # noqa: E402

# Bodies are capped as they arrive, before Daphne buffers them (apps.core.daphne_cap),
# and again before the app reads them (apps.core.bodycap): JSON 413 everywhere.
daphne_cap.install(max_bytes=settings.RETASC_MAX_BODY_BYTES, upload_max_bytes=settings.RETASC_UPLOAD_MAX_BYTES)

# /mcp goes to the MCP server (its own ASGI stack, see apps.mcp.asgi); all else to Django.
# SIGTERM: requests in flight finish, new ones get 503 UNAVAILABLE (apps.core.graceful).
http_app = GracefulHTTP(
    BodyCap(
        route_mcp(mcp_application(), django_app),
        max_bytes=settings.RETASC_MAX_BODY_BYTES,
        upload_max_bytes=settings.RETASC_UPLOAD_MAX_BYTES,
    )
)

from apps.dash.routing import websocket_application  # noqa: E402

application = ProtocolTypeRouter({"http": http_app, "websocket": websocket_application})
