"""ASGI entry point: Django first, then the protocol routers (see STYLE.md §12)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retasc.settings.base")

from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from apps.core.keystore import check_master_key  # noqa: E402

check_master_key()  # a wrong master key stops start-up with one sentence

from apps.core.jobs import start_inprocess_jobs  # noqa: E402

start_inprocess_jobs()

application = ProtocolTypeRouter({"http": django_app})
