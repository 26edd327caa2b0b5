"""The client's address, trusting forwarded headers only from configured proxies.

``X-Forwarded-For`` is whatever the sender wrote, unless the sender is one of our own
proxies (``RETASC_TRUSTED_PROXIES``: addresses or networks). So the address is read from
the right: the socket's peer first; while that hop is a trusted proxy, step to the
address it says it received the request from. The first hop that is not a trusted proxy
is the client. With no trusted proxies (the default) the header is ignored, and a client
cannot pick its own rate-limit bucket by sending one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_proxies(values: Iterable[str]) -> tuple[Network, ...]:
    """``["10.0.0.1", "192.168.0.0/16", "::1"]`` -> networks. A bad entry stops start-up."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"RETASC_TRUSTED_PROXIES must list IP addresses or networks (e.g. 127.0.0.1,10.0.0.0/8), not {value!r}."
            ) from None
    return tuple(networks)


def _address(value: str):
    value = (value or "").strip()
    if value.startswith("[") and "]" in value:  # [v6]:port
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # v4:port
        value = value.split(":", 1)[0]
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _trusted(address, proxies: tuple[Network, ...]) -> bool:
    return any(address in net for net in proxies if address.version == net.version)


def client_ip(remote_addr: str | None, forwarded_for: str | None, proxies: tuple[Network, ...] | None = None) -> str | None:
    """The client's address for a request that arrived from ``remote_addr`` carrying
    ``X-Forwarded-For: forwarded_for``."""
    proxies = settings.RETASC_TRUSTED_PROXIES if proxies is None else proxies
    current = _address(remote_addr or "")
    if current is None:
        return remote_addr or None
    hops = [h for h in (forwarded_for or "").split(",") if h.strip()] if proxies else []
    while hops and _trusted(current, proxies):
        previous = _address(hops.pop())
        if previous is None:  # a malformed hop: go no further than the last trusted one
            break
        current = previous
    return str(current)


def request_ip(request) -> str | None:
    """``client_ip`` of a Django (or DRF) request."""
    meta = request.META
    return client_ip(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR"))


FORWARDED_MARK = "retasc.forwarded"


class UntrustedForwardedHeaders:
    """Middleware, first in the stack: a request that did not come from a trusted proxy
    loses its ``X-Forwarded-For`` and ``X-Forwarded-Proto``, so nothing downstream
    (Django's HTTPS detection behind ``SECURE_PROXY_SSL_HEADER``, a library's own rate
    limiter) can be told a made-up client address or scheme."""

    FORWARDED = ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST", "HTTP_X_FORWARDED_PORT")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        meta = request.META
        if any(meta.get(name) for name in self.FORWARDED):
            # Kept for rules that care whether a proxy was involved at all (``/metrics``
            # is for direct loopback clients only), whether or not the headers are believed.
            meta[FORWARDED_MARK] = True
        remote = _address(meta.get("REMOTE_ADDR") or "")
        if remote is None or not _trusted(remote, settings.RETASC_TRUSTED_PROXIES):
            for name in self.FORWARDED:
                meta.pop(name, None)
        return self.get_response(request)
