"""A live Daphne for browser tests: a subprocess on a free loopback port sharing the
test database (SQLite file or PostgreSQL test DB), the data directory (org data keys)
and the master key, so rows a ``transactional_db`` test commits are what it serves."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from tests.live import LiveServer, start_daphne

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


def start(tmp: Path) -> LiveServer:
    # In-memory channel layer: the events a test triggers are published inside this server.
    return start_daphne(tmp, drop_env=("REDIS_URL",), RETASC_EMAIL_VERIFICATION="optional")


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
