"""What oversized request bodies cost a server process in memory (not a test: a manual
measurement, numbers in docs/security.md).

Starts one Daphne (embedded mode, a fresh data directory), then sends unauthenticated
oversized bodies: a POST to /mcp and to /api/v1/issues with a Content-Length, the same
chunked, and a PUT to a bogus upload URL. Prints the process's resident memory (VmRSS)
and its peak (VmHWM) before and after, and each answer's status and content type.

    .venv/bin/python -m bench.body_cap [--mb 400] [--root PATH]

``--root`` runs another checkout's code with this venv (to compare with an older one).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = b"[" * (1024 * 1024)


def _mem(pid: int) -> dict:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            name, value = line.split(":")
            out[name] = round(int(value.split()[0]) / 1024, 1)  # MiB
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _send(port: int, method: str, path: str, mb: int, *, chunked: bool) -> tuple[int, str, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.putrequest(method, path)
    conn.putheader("Content-Type", "application/json")
    if chunked:
        conn.putheader("Transfer-Encoding", "chunked")
    else:
        conn.putheader("Content-Length", str(mb * len(CHUNK)))
    conn.endheaders()
    try:
        for _ in range(mb):
            conn.send(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK)
        if chunked:
            conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed before the whole body was sent
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, resp.getheader("Content-Type") or "", len(body)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=400)
    p.add_argument("--root", default=str(ROOT))
    o = p.parse_args()
    root = Path(o.root)
    data = Path(tempfile.mkdtemp(prefix="retasc-bodycap-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(RETASC_DATA_DIR=str(data), RETASC_INPROCESS_JOBS="false", DJANGO_SETTINGS_MODULE="retasc.settings.base")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=root, env=env, check=True)
    port = _port()
    daphne = Path(sys.executable).with_name("daphne")
    log = open(data / "daphne.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(daphne), "-b", "127.0.0.1", "-p", str(port), "retasc.asgi:application"], cwd=root, env=env, stdout=log, stderr=log
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        _send(port, "GET", "/api/health", 0, chunked=False)
        report = {"mb_per_request": o.mb, "root": str(root), "start": _mem(proc.pid), "requests": []}
        for method, path, chunked in [
            ("POST", "/mcp", False),
            ("POST", "/api/v1/issues", False),
            ("POST", "/mcp", True),
            ("POST", "/api/v1/issues", True),
            ("PUT", "/api/v1/uploads/bogus", False),
        ]:
            t0 = time.monotonic()
            status, ctype, size = _send(port, method, path, o.mb, chunked=chunked)
            report["requests"].append(
                {
                    "request": f"{method} {path}{' (chunked)' if chunked else ''}",
                    "status": status,
                    "contentType": ctype,
                    "seconds": round(time.monotonic() - t0, 1),
                    "memory": _mem(proc.pid),
                }
            )
        time.sleep(1)
        report["end"] = _mem(proc.pid)
        print(json.dumps(report, indent=1))
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


if __name__ == "__main__":
    main()
