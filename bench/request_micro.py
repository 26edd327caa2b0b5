"""In-process costs of two pieces of the request path, no server and no database.

* the MCP SDK's handler kernel (``serve_one``) for one ``tools/call`` with a 4 KB
  answer: through ``MCPServer``'s tool layer, and through a low-level ``Server``
  handler calling the same function on a worker thread;
* encoding and decoding a claim answer: DRF's ``JSONRenderer`` and ``json``, and
  ``orjson`` when it is installed (it is not a dependency).

    .venv/bin/python -m bench.request_micro
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
import timeit
from dataclasses import dataclass, field
from typing import Any

import anyio

from bench.common import print_header

ANSWER = {
    "issue": {
        "identifier": "BENCH-6",
        "title": "Bench 6 of BENCH: " + "word " * 8,
        "body": "x" * 3000,
        "status": "doing",
        "labels": ["a"] * 5,
        "acceptance": [{"text": "t" * 60, "check": None}] * 4,
        "people": [{"email": "e@example.com", "name": "n", "id": i} for i in range(5)],
        "createdAt": "2026-11-30T17:01:42.123Z",
    },
    "claimToken": "t" * 43,
    "branch": "bench-6",
    "hints": ["h" * 80] * 3,
}


def sdk(n: int) -> dict:
    from mcp.server.connection import Connection
    from mcp.server.lowlevel import Server
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.runner import serve_one
    from mcp.shared.message import ServerMessageMetadata
    from mcp.shared.transport_context import TransportContext
    from mcp_types import CallToolResult, TextContent

    @dataclass
    class Context:
        request_id: Any
        message_metadata: Any
        transport: Any = TransportContext(kind="streamable-http", can_send_request=False)
        cancel_requested: anyio.Event = field(default_factory=anyio.Event)
        can_send_request: bool = False

        async def send_raw_request(self, *a, **k):
            raise RuntimeError

        async def notify(self, *a, **k):
            return None

        async def progress(self, *a, **k):
            return None

    def operation(**arguments):
        text = json.dumps(ANSWER, separators=(",", ":"))
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=json.loads(text))

    names = ("identifier", "status", "claimToken")

    def tool(**arguments):
        return operation(**arguments)

    tool.__signature__ = inspect.Signature(
        [inspect.Parameter(x, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any) for x in names]
    )
    tool.__annotations__ = {x: Any for x in names}
    high = MCPServer("bench", tools=[Tool.from_function(tool, name="t", structured_output=False)])

    async def direct(ctx, params):
        return await anyio.to_thread.run_sync(lambda: operation(**(params.arguments or {})))

    low = Server("bench", on_call_tool=direct)
    params = {"name": "t", "arguments": {"identifier": "BENCH-6", "status": "done", "claimToken": "t" * 43}}

    async def per_call(server) -> float:
        t0 = time.process_time()
        for i in range(n):
            connection = Connection.from_envelope("2025-06-18", None, None)
            await serve_one(
                server, Context(i, ServerMessageMetadata()), "tools/call", params, connection=connection, lifespan_state={}
            )
        return round((time.process_time() - t0) * 1e6 / n, 1)

    async def main():
        await per_call(high._lowlevel_server)  # warm-up
        return {
            "mcpserver_tools_call_us": await per_call(high._lowlevel_server),
            "lowlevel_tools_call_us": await per_call(low),
            "building_the_result_us": round(timeit.timeit(operation, number=n) * 1e6 / n, 1),
        }

    return anyio.run(main)


def encoding(n: int) -> dict:
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retasc.settings.test")
    import django

    django.setup()
    from rest_framework.renderers import JSONRenderer

    renderer = JSONRenderer()
    body = renderer.render(ANSWER)
    out = {
        "answer_bytes": len(body),
        "drf_render_us": round(timeit.timeit(lambda: renderer.render(ANSWER), number=n) * 1e6 / n, 2),
        "json_loads_us": round(timeit.timeit(lambda: json.loads(body), number=n) * 1e6 / n, 2),
    }
    try:
        import orjson
    except ImportError:
        out["orjson"] = "not installed"
    else:
        out["orjson_dumps_us"] = round(timeit.timeit(lambda: orjson.dumps(ANSWER), number=n) * 1e6 / n, 2)
        out["orjson_loads_us"] = round(timeit.timeit(lambda: orjson.loads(body), number=n) * 1e6 / n, 2)
    return out


def main() -> int:
    print_header("Request path pieces, in process")
    print(json.dumps({"sdk": sdk(2000), "json": encoding(20000)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
