"""The MCP handshake `retasc doctor` runs: the SDK's own client over streamable HTTP,
initialize, list the tools, call ``whoami`` with the folder's key."""

from __future__ import annotations

import asyncio
import json

import httpx2


async def _whoami(url: str, key: str, timeout: float) -> dict:
    # defers a heavy import: the MCP SDK (most of a second) loads only when doctor runs the handshake
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            tools = await client.list_tools()
            result = await client.call_tool("whoami", {})
            data = result.structured_content or json.loads(result.content[0].text)
            if result.is_error:
                raise RuntimeError(f"{data.get('message', 'refused')} ({data.get('code', 'ERROR')})")
            return {"tools": len(tools.tools), "whoami": data}


def mcp_whoami(url: str, key: str, timeout: float = 20.0) -> dict:
    """``{"tools": n, "whoami": {...}}``; raises on any failure (the caller words it)."""
    return asyncio.run(asyncio.wait_for(_whoami(url, key, timeout), timeout + 5))


def failure_reason(exc: BaseException) -> str:
    """One line for an exception (anyio wraps transport errors in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    text = str(exc).strip() or type(exc).__name__
    if "401" in text or "Unauthorized" in text:
        return "the server refused the key (401 UNAUTHORIZED)"
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0][:200]
