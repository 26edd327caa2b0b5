"""A live Daphne for browser tests: a subprocess on a free loopback port sharing the
test database (SQLite file or PostgreSQL test DB), the data directory (org data keys)
and the master key, so rows a ``transactional_db`` test commits are what it serves."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.live import LiveServer, start_daphne

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    expect = sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


Server = LiveServer


def browser_marks() -> list:
    """``pytestmark`` of a browser test module: slow, and skipped with the reason when
    the playwright package or /usr/bin/chromium is missing."""
    marks = [pytest.mark.slow]
    if sync_playwright is None:
        marks.append(pytest.mark.skip(reason="playwright is not installed (pip install -r requirements/dev.txt)"))
    elif not CHROMIUM.exists():
        marks.append(pytest.mark.skip(reason="/usr/bin/chromium is missing (apt-get install -y chromium)"))
    return marks


@contextmanager
def chromium():
    """Debian's Chromium, headless, driven by Playwright's sync API. That API keeps an
    event loop running on this thread; the test's own ORM calls are still plain
    synchronous code (Django's documented Playwright setup), hence the async flag."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def session_cookie(user, first_page: str = "/queue/") -> str:
    """A signed-in session of ``user`` (no password typed); the first page picks the
    person's org into the session."""
    from django.test import Client  # defer: Django's test client needs configured settings

    client = Client()
    client.force_login(user)
    assert client.get(first_page).status_code == 200
    return client.cookies["sessionid"].value


def signed_in_page(browser, server: LiveServer, user, *, width=1400, height=900, first_page="/queue/", **options):
    """A page in a new browser context whose session is ``user``'s (close its ``.context``)."""
    context = browser.new_context(base_url=server.base, viewport={"width": width, "height": height}, locale="en-US", **options)
    context.add_cookies([{"name": "sessionid", "value": session_cookie(user, first_page), "url": server.base}])
    page = context.new_page()
    page.set_default_timeout(15_000)
    return page


def start(tmp: Path, **env) -> LiveServer:
    # In-memory channel layer: the events a test triggers are published inside this server.
    return start_daphne(tmp, drop_env=("REDIS_URL",), **{"RETASC_EMAIL_VERIFICATION": "optional", **env})


def mcp_call(url: str, key: str, tool: str, **arguments) -> dict:
    """One MCP tool call with the SDK's client, on its own thread and event loop (the
    Playwright sync API owns the test thread's loop)."""

    async def go():
        import httpx2
        from mcp.client.client import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                result = await client.call_tool(tool, arguments)
                return {"error": result.is_error, **json.loads(result.content[0].text)}

    out: dict = {}

    def run():
        try:
            out["result"] = asyncio.run(go())
        except BaseException as exc:  # surfaced in the test thread
            out["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(90)
    if "exc" in out:
        raise out["exc"]
    return out["result"]
