"""A live Daphne on a free loopback port, sharing the test database.

The server is a real subprocess (``daphne retasc.asgi:application``) started with the
test database's URL (SQLite: the test DB file; PostgreSQL: the test DB name), the same
data directory (org data keys) and master key, so rows a test commits
(``transactional_db``) are what the server sees. Used by the MCP, Dash and CLI tests.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from django.conf import settings

DAPHNE = Path(sys.executable).with_name("daphne")
ROOT = Path(__file__).resolve().parents[1]


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


def start_daphne(tmp_path: Path, drop_env: tuple = (), **extra_env) -> LiveServer:
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
    for name in drop_env:
        env.pop(name, None)
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
