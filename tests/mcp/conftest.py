"""A live Daphne on a free loopback port, sharing the test database, and an MCP client.

The server is a real subprocess (``daphne retasc.asgi:application``) started with the
test database's URL (SQLite: the test DB file; PostgreSQL: the test DB name), the same
data directory (org data keys) and master key, so rows a test creates with ``tworld``
(committed: ``transactional_db``) are what the server sees.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

DAPHNE = Path(sys.executable).with_name("daphne")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = quote(db.get("USER") or "")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{db['NAME']}"


@dataclass
class LiveServer:
    proc: subprocess.Popen
    base: str
    log_path: Path

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_daphne(tmp_path: Path, **extra_env) -> LiveServer:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "retasc.settings.test",
        "DATABASE_URL": test_database_url(),
        "RETASC_DATA_DIR": str(settings.DATA_DIR),
        "RETASC_MASTER_KEY": settings.RETASC_MASTER_KEY,
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "RETASC_PUBLIC_URL": base,
        "RETASC_INPROCESS_JOBS": "false",
        "PYTHONUNBUFFERED": "1",
        **extra_env,
    }
    log_path = tmp_path / f"daphne-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), "retasc.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(proc, base, log_path)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited with {proc.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(f"{base}/.well-known/mcp.json", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"daphne did not start:\n{server.log()}")
        time.sleep(0.1)


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
