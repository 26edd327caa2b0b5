"""A Content-Security-Policy on the Dash's HTML pages (and the sign-in pages, which share
its base template): scripts only from our own static files, no inline script, no
``eval``, no framing, no plugins. The templates keep to it: behaviour lives in
static/dash/dash.js (``data-confirm``, ``data-confirm-text``, ``data-autosubmit``,
``data-copy``), never in ``<script>`` blocks or ``on…=`` attributes.

Inline *styles* stay allowed (``style-src 'unsafe-inline'``): htmx injects its indicator
style and a few templates set one-off widths; styles run no code.

The Django admin and the API's documentation pages are left alone (they ship their own
inline scripts and are not Dash pages).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

EXEMPT_PREFIXES = ("/admin/", "/api/")


def policy() -> str:
    public = urlsplit(settings.PUBLIC_URL)
    socket = f"{'wss' if public.scheme == 'https' else 'ws'}://{public.netloc}"
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "font-src 'self'",
            f"connect-src 'self' {socket}",
            "object-src 'none'",
            "base-uri 'self'",
            "frame-ancestors 'none'",
        ]
    )


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.header = policy()

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.get("Content-Type", "").startswith("text/html")
            and not request.path.startswith(EXEMPT_PREFIXES)
            and "Content-Security-Policy" not in response
        ):
            response["Content-Security-Policy"] = self.header
        return response
