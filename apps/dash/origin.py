"""The Dash websocket accepts only pages of this site: same scheme-less host *and port*.

Channels' ``AllowedHostsOriginValidator`` compares the Origin's host name with
``ALLOWED_HOSTS`` and ignores the port, so any other service on the same host (another
port of 127.0.0.1, say) could open a socket with the visitor's session cookie. Here the
Origin must name an allowed host, and either be the public URL's origin or match the
host and port the socket itself came to (its ``Host`` header; a missing port there is
the default port of the Origin's scheme, as browsers omit it).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(value: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """Whether a page at ``origin`` may open the socket that arrived with ``Host: host_header``."""
    parsed = _origin(origin or "")
    if parsed is None:
        return False
    scheme, host, port = parsed
    if not validate_host(f"[{host}]" if ":" in host else host, settings.ALLOWED_HOSTS):
        return False
    if parsed == _origin(settings.PUBLIC_URL):
        return True
    target_host, target_port = split_domain_port((host_header or "").lower())
    if not target_host:
        return False
    try:
        target = int(target_port) if target_port else DEFAULT_PORTS[scheme]
    except ValueError:
        return False
    return (host, port) == (target_host.strip("[]"), target)


class SameOriginValidator:
    """ASGI wrapper: a websocket whose Origin is not this site is refused at the handshake."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            headers = {k.decode("latin1").lower(): v.decode("latin1") for k, v in scope.get("headers", [])}
            if not origin_allowed(headers.get("origin"), headers.get("host")):
                return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
