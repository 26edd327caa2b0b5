"""`retasc mcp`: the Retasc tools over stdio, for local agents that prefer it.

A stdio MCP server (the SDK's) that forwards to the server's streamable-HTTP ``/mcp``
with the folder's agent key (or ``RETASC_KEY``): ``tools/list`` is the server's own list,
and every ``tools/call`` goes through the same operations there, answers and refusals
unchanged. It opens no database; it works against a remote Retasc.

The MCP SDK is imported only when the command runs (a heavy import the other commands
never pay for).
"""

from __future__ import annotations

import os

import typer

from retasc import __version__
from retasc.cli.client import Api
from retasc.cli.errors import AUTH, LOCAL, UNREACHABLE, CliError
from retasc.cli.output import handled, state

UPSTREAM_TIMEOUT = 120.0


def _key(st) -> str:
    key = os.environ.get("RETASC_KEY", "").strip()
    if key:
        return key
    if st.binding is not None and st.binding.server == st.server:
        return st.binding.key()
    raise CliError("No agent key: run retasc bind in this folder, or set RETASC_KEY.", exit_code=LOCAL)


async def serve(url: str, key: str, *, stdin=None, stdout=None) -> None:
    """Serve stdio until the client closes it, forwarding to ``url`` with ``key``."""
    import httpx2  # heavy: deferred with the SDK below
    import mcp_types as types
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    headers = {"Authorization": f"Bearer {key}", "User-Agent": f"retasc-mcp/{__version__}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=UPSTREAM_TIMEOUT)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as upstream:

            async def list_tools(ctx, params) -> types.ListToolsResult:
                return await upstream.list_tools(cursor=params.cursor if params else None)

            async def call_tool(ctx, params) -> types.CallToolResult:
                return await upstream.call_tool(params.name, params.arguments or {})

            server = Server(
                "retasc",
                version=__version__,
                title="Retasc (stdio)",
                instructions=upstream.instructions,
                on_list_tools=list_tools,
                on_call_tool=call_tool,
            )
            async with stdio_server(stdin, stdout) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())


@handled
def mcp(ctx: typer.Context):
    """Serve the Retasc MCP tools over stdio (for agents configured with a command), forwarding
    each call to the server's /mcp with this folder's agent key or RETASC_KEY."""
    import anyio  # heavy: the SDK's event loop, only for this command

    st = state(ctx)
    key = _key(st)
    url = f"{st.server}/mcp"
    # Check the key first, so that a bad one is one sentence here, not a protocol error
    # the agent's client may hide.
    with Api(st.server, key=key) as api:
        try:
            api.get("/api/v1/whoami", auth="key")
        except CliError as exc:
            if exc.exit_code == AUTH:
                raise CliError(
                    f"The server at {st.server} refused this agent key (UNAUTHORIZED); run retasc bind --force, or fix RETASC_KEY.",
                    exit_code=AUTH,
                ) from None
            raise
    try:
        anyio.run(serve, url, key)
    except KeyboardInterrupt:
        return
    except BaseException as exc:  # an upstream failure: one sentence on stderr (stdout is the protocol)
        raise CliError(f"Cannot serve the Retasc MCP tools from {url}: {_reason(exc)}.", exit_code=UNREACHABLE) from None


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return (str(exc) or type(exc).__name__).strip().rstrip(".")
