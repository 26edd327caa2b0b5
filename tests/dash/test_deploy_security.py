"""Item 16 of the hardening issue: the websocket Origin check includes the port; with an
https public URL `manage.py check --deploy` is clean; Dash pages carry a
Content-Security-Policy and no inline script."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings

from apps.core.clientip import parse_proxies
from apps.dash.origin import origin_allowed
from apps.dash.routing import websocket_application

ROOT = Path(__file__).resolve().parents[2]


# --- the websocket Origin ---------------------------------------------------------------


@override_settings(
    ALLOWED_HOSTS=["127.0.0.1", "localhost", "[::1]", "retasc.example.com"], PUBLIC_URL="https://retasc.example.com"
)
@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),  # same origin
        ("http://127.0.0.1:9999", "127.0.0.1:8000", False),  # another port of the same host
        ("http://127.0.0.1", "127.0.0.1:8000", False),
        ("http://evil.example", "127.0.0.1:8000", False),  # not an allowed host
        ("https://retasc.example.com", "127.0.0.1:8001", True),  # the public URL, behind a proxy
        ("https://retasc.example.com:8443", "retasc.example.com", False),
        ("https://retasc.example.com", "retasc.example.com", True),  # default port omitted
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://[::1]:8001", "[::1]:8000", False),
        (None, "127.0.0.1:8000", False),  # no Origin: not a page of ours
        ("null", "127.0.0.1:8000", False),
        ("http://127.0.0.1:notaport", "127.0.0.1:8000", False),
    ],
)
def test_origin_allowed(origin, host, allowed):
    assert origin_allowed(origin, host) is allowed


def _connect(origin: bytes, host: bytes):
    async def go():
        communicator = WebsocketCommunicator(websocket_application, "/ws/org/", headers=[(b"origin", origin), (b"host", host)])
        result = await communicator.connect()
        await communicator.disconnect()
        return result

    return asyncio.run(go())


def test_a_socket_from_another_port_is_refused_at_the_handshake():
    # Refused by the validator, before the consumer: an anonymous socket from our own
    # origin does reach the consumer, which closes it with 4401 (not signed in).
    connected, code = _connect(b"http://127.0.0.1:9999", b"127.0.0.1:8000")
    assert connected is False and code != 4401
    connected, code = _connect(b"http://127.0.0.1:8000", b"127.0.0.1:8000")
    assert connected is False and code == 4401


# --- check --deploy ---------------------------------------------------------------------


def _check_deploy(tmp_path, public_url: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "retasc.settings.base",
        "RETASC_PUBLIC_URL": public_url,
        "RETASC_ALLOWED_HOSTS": "retasc.example.com",
        "RETASC_DATA_DIR": str(tmp_path),
        "DJANGO_SECRET_KEY": "k3y-" + "x9Q!" * 16,
        "RETASC_MASTER_KEY": "dGVzdC1vbmx5LW1hc3Rlci1rZXktMzItYnl0ZXMhISE=",
    }
    env.pop("DATABASE_URL", None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # set for the browser tests in this process; never in a deployment
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_an_https_public_url(tmp_path):
    result = _check_deploy(tmp_path, "https://retasc.example.com")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_https_settings_follow_the_public_url(tmp_path):
    code = (
        "from django.conf import settings as s;"
        "print(s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS > 0)"
    )
    for url, expected in (
        ("https://retasc.example.com", "True True True True"),
        ("http://127.0.0.1:8000", "False False False False"),
    ):
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "retasc.settings.base",
            "RETASC_PUBLIC_URL": url,
            "RETASC_DATA_DIR": str(tmp_path),
            "DJANGO_SECRET_KEY": "x" * 60,
            "RETASC_MASTER_KEY": "dGVzdC1vbmx5LW1hc3Rlci1rZXktMzItYnl0ZXMhISE=",
        }
        out = subprocess.run(
            [sys.executable, "-c", f"import django;django.setup();{code}"], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert out.stdout.strip() == expected, out.stderr


@override_settings(SECURE_SSL_REDIRECT=True, RETASC_TRUSTED_PROXIES=parse_proxies(["10.0.0.1"]))
def test_ssl_redirect_believes_the_proto_header_only_from_a_trusted_proxy(db):
    # From the proxy, "https" is believed: no redirect.
    assert Client(REMOTE_ADDR="10.0.0.1").get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https").status_code == 200
    # From anyone else the same header is ignored: redirected to https.
    stranger = Client(REMOTE_ADDR="203.0.113.7").get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
    assert stranger.status_code == 301 and stranger["Location"].startswith("https://")
    # Health checks probe over plain HTTP.
    assert Client(REMOTE_ADDR="203.0.113.7").get("/api/health").status_code == 200


# --- Content-Security-Policy --------------------------------------------------------------

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)


def test_dash_pages_carry_a_strict_script_policy_and_no_inline_script(world, issue_factory):
    issue = issue_factory("Something")
    client = Client()
    client.force_login(world.owner)
    pages = ["/queue/", "/fleet/", f"/issues/{issue.identifier}/", "/issues/new/", "/org/members/", "/org/keys/"]
    pages += ["/org/invites/", "/org/projects/", "/org/delete/", "/device/"]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        csp = response["Content-Security-Policy"]
        script_src = re.search(r"script-src ([^;]*)", csp).group(1)
        assert script_src == "'self'", (url, csp)
        assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
        html = response.content.decode()
        assert not INLINE_SCRIPT.search(html), url
        assert not INLINE_HANDLER.search(html), (url, INLINE_HANDLER.search(html))
    signin = Client().get("/accounts/login/")
    assert "script-src 'self'" in signin["Content-Security-Policy"] and not INLINE_SCRIPT.search(signin.content.decode())


def test_no_template_has_an_inline_script_or_handler():
    offenders = []
    for path in list((ROOT / "templates").rglob("*.html")) + list((ROOT / "apps").rglob("templates/**/*.html")):
        if "admin" in path.parts:  # the Django admin's own pages are not Dash pages
            continue
        text = path.read_text()
        if INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text) or "hx-on" in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
