"""A live Daphne for browser tests: a subprocess on a free loopback port sharing the
test database (SQLite file or PostgreSQL test DB), the data directory (org data keys)
and the master key, so rows a ``transactional_db`` test commits are what it serves."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
DAPHNE = Path(sys.executable).with_name("daphne")
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
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
class Server:
    proc: subprocess.Popen
    base: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start(tmp: Path) -> Server:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "retasc.settings.test",
        "DATABASE_URL": database_url(),
        "RETASC_DATA_DIR": str(settings.DATA_DIR),
        "RETASC_MASTER_KEY": settings.RETASC_MASTER_KEY,
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "RETASC_PUBLIC_URL": base,
        "RETASC_INPROCESS_JOBS": "false",
        "RETASC_EMAIL_VERIFICATION": "optional",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REDIS_URL", None)  # in-memory channel layer: events published inside this server
    log_path = tmp / f"daphne-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), "retasc.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(proc, base, log_path)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited with {proc.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(f"{base}/accounts/login/", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"daphne did not start:\n{server.log()}")
        time.sleep(0.1)


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
