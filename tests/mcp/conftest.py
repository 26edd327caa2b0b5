"""A live Daphne on a free loopback port, sharing the test database, and an MCP client.

The server is a real subprocess (``daphne retasc.asgi:application``) started with the
test database's URL (SQLite: the test DB file; PostgreSQL: the test DB name), the same
data directory (org data keys) and master key, so rows a test creates with ``tworld``
(committed: ``transactional_db``) are what the server sees.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import pytest

from tests.live import LiveServer, free_port, start_daphne, test_database_url  # noqa: F401 (re-exported)


@pytest.fixture(scope="session")
def live_mcp(django_db_setup, tmp_path_factory):
    """One server for the session (the test database outlives every test in it)."""
    server = start_daphne(tmp_path_factory.mktemp("daphne"))
    yield server
    server.stop()


@pytest.fixture
def server_factory(django_db_setup, tmp_path):
    """Extra servers for one test (SIGTERM, anonymous discovery); stopped afterwards."""
    started: list[LiveServer] = []

    def start(**env) -> LiveServer:
        server = start_daphne(tmp_path, **env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@asynccontextmanager
async def mcp_client(url: str, key: str | None = None, mode: str = "legacy", statuses: list | None = None):
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def record(response):
        if statuses is not None:
            statuses.append(response.status_code)

    hooks = {"response": [record]}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120), event_hooks=hooks) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


class Refused(Exception):
    def __init__(self, payload: dict):
        super().__init__(payload.get("code"))
        self.payload = payload
        self.code = payload.get("code")


def payload_of(result) -> dict:
    """The JSON of a tool result; the structured content and the text must agree."""
    text = result.content[0].text
    data = json.loads(text)
    assert result.structured_content == data
    return data


async def call(client, tool: str, **arguments) -> dict:
    """Call a tool; a refusal raises ``Refused`` carrying its JSON."""
    result = await client.call_tool(tool, arguments)
    data = payload_of(result)
    if result.is_error:
        raise Refused(data)
    return data


async def refusal(client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was expected to be refused, got {result.structured_content}"
    return payload_of(result)
