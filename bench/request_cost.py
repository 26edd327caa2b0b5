"""Server CPU per request: process CPU of one Daphne over a fixed amount of work.

For each checkout given (``--trees``; default: this one), in alternating rounds: a
fresh schema in one PostgreSQL database, migrated and bootstrapped, ``--pairs`` ready
issues per transport, one Daphne from that checkout (its own ``.venv``), then these
cells, each timed as the server process's user + system CPU (``/proc/PID/stat``) over
the requests it served:

* ``mcp_ping``: JSON-RPC ``ping`` over MCP (the transport, the SDK and the key check:
  the floor of an MCP request here);
* ``mcp_list``: ``tools/list``;
* ``http_whoami``: ``GET /api/v1/whoami`` (Django, DRF, the key check, the throttle and
  a small answer: the floor of an API request);
* ``mcp_pair`` / ``http_pair``: ``next_issue`` then ``save_issue status=done`` with the
  claim token (a claim + finish, two requests), ``--agents`` concurrent agents. With
  ``--profile`` (and py-spy installed), ``py-spy --gil`` samples the server during these
  cells and each sample is counted as taken under the operation, under the key check,
  or around them (server, framework, SDK, thread hops).

The MCP client is the SDK's own (legacy handshake, as the work-loop bench), so what the
server does per request is what a real agent makes it do.

    .venv/bin/python -m bench.request_cost --db-url postgres://postgres@127.0.0.1:5432/NAME \\
        --trees .,../other-checkout --rounds 3

The database named is emptied (its public schema dropped) before every round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import ROOT, free_port, print_header

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime of every thread


def reset_schema(db_url: str) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


class Tree:
    """A checkout to measure, with extra environment for its server: ``PATH`` or
    ``PATH+NAME=VALUE+NAME=VALUE`` (the same code under two settings)."""

    def __init__(self, spec: str):
        path, *pairs = spec.split("+")
        self.path = Path(path).resolve()
        self.env = dict(pair.split("=", 1) for pair in pairs)
        self.name = "+".join([self.path.name, *pairs])


def tree_env(tree: Tree, db_url: str, data_dir: str, base: str) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "retasc.settings.base",
        "DATABASE_URL": db_url,
        "RETASC_DATA_DIR": data_dir,
        "RETASC_PUBLIC_URL": base,
        "RETASC_API_RATE": "1000000/min",
        "RETASC_INPROCESS_JOBS": "false",
        "RETASC_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(tree.path),
    }
    env.pop("REDIS_URL", None)
    env.update(tree.env)
    return env


def prepare(tree: Tree, db_url: str, issues: int, agents: int) -> tuple[dict, str]:
    reset_schema(db_url)
    data_dir = tempfile.mkdtemp(prefix="retasc-request-cost-")
    env = tree_env(tree, db_url, data_dir, "http://127.0.0.1:8000")
    py = str(tree.path / ".venv" / "bin" / "python")

    def manage(*args):
        out = subprocess.run([py, "manage.py", *args], cwd=tree.path, env=env, capture_output=True, text=True, timeout=900)
        if out.returncode:
            raise RuntimeError(out.stdout + out.stderr)
        return out.stdout

    manage("migrate", "--noinput", "-v0")
    manage("bootstrap", "--org", "Bench", "--project", "BENCH", "--email", "owner@bench.local", "--json")
    # The seeder of this checkout (same schema) writes the issues and the keys.
    out = subprocess.run(
        [sys.executable, "-m", "bench.common", "seed", "--projects", "BENCH", "--issues", str(issues)]
        + ["--keys", str(agents), "--email", "owner@bench.local"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode:
        raise RuntimeError(out.stdout + out.stderr)
    seeded = json.loads(out.stdout.strip().splitlines()[-1])
    return seeded, data_dir


def start(tree: Tree, db_url: str, data_dir: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(data_dir, "daphne.log"), "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(tree.path / ".venv" / "bin" / "daphne"), "-b", "127.0.0.1", "-p", str(port), "retasc.asgi:application"],
        cwd=tree.path,
        env=tree_env(tree, db_url, data_dir, base),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(Path(data_dir, "daphne.log").read_text())
        try:
            with urllib.request.urlopen(f"{base}/.well-known/mcp.json", timeout=2):
                return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("daphne did not start")


# --- the cells ------------------------------------------------------------------------


async def mcp_clients(url: str, keys: list[str], body):
    """Run ``body(client, i)`` in one legacy-handshake SDK client per key, all at once,
    once every client has initialized. Returns the seconds the bodies took."""
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    ready, opened = asyncio.Event(), []
    times = {}

    async def one(i, key):
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                opened.append(i)
                if len(opened) == len(keys):
                    ready.set()
                await ready.wait()
                times.setdefault("t0", time.monotonic())
                await body(client, i)

    await asyncio.gather(*(one(i, k) for i, k in enumerate(keys)))
    return time.monotonic() - times["t0"]


# Where a sample was taken: under the operation, under the key check, or around them.
SPLIT = {
    "mcp_pair": (["run_operation (apps/mcp/tools.py"], ["_authenticate (apps/mcp/auth.py", "actor_from_token"]),
    "http_pair": (["_handler.<locals>.handle (apps/api/views.py"], ["BearerKeyAuthentication.authenticate"]),
}


def spy(pid: int, out: str):
    """``py-spy`` (not a dependency: pip install it to profile) on the server, or None."""
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        return None
    cmd = [str(exe), "record", "-p", str(pid), "-r", "200", "--threads", "--gil", "--format", "raw", "-o", out, "--nonblocking"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def split(path: str, cell: str) -> dict:
    operation, key_check = SPLIT[cell]
    counts = {"operation": 0, "key_check": 0, "around": 0}
    for line in Path(path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        kind = (
            "key_check" if any(m in stack for m in key_check) else "operation" if any(m in stack for m in operation) else "around"
        )
        counts[kind] += int(n)
    total = sum(counts.values()) or 1
    return {k: f"{100 * v / total:.1f}%" for k, v in counts.items()} | {"samples": total}


def profiled(pid: int, cell: str, o, fn):
    """Run ``fn``, with py-spy on the server when --profile asks for it."""
    if not o.profile:
        return fn(), None
    out = os.path.join(tempfile.mkdtemp(prefix="retasc-spy-"), f"{cell}.txt")
    proc = spy(pid, out)
    if proc is None:
        return fn(), "py-spy not installed"
    try:
        result = fn()
    finally:
        proc.send_signal(2)  # SIGINT: py-spy writes its samples and exits
        proc.wait(60)
    return result, split(out, cell) if os.path.exists(out) else "no samples"


def measured(pid: int, fn):
    c0 = cpu_seconds(pid)
    result = fn()
    return cpu_seconds(pid) - c0, result


def run_cells(pid: int, base: str, keys: list[str], o) -> dict:
    import httpx2

    url = f"{base}/mcp"
    cells = {}
    errors = []

    def per_request(name, requests, spent, seconds):
        cells[name] = {
            "requests": requests,
            "cpu_ms_per_request": round(spent * 1000 / requests, 2),
            "seconds": round(seconds, 2),
        }

    def per_pair(name, pairs, spent, seconds, profile):
        cells[name] = {
            "pairs": pairs,
            "cpu_ms_per_pair": round(spent * 1000 / pairs, 2),
            "seconds": round(seconds, 2),
            "pairs_per_s": round(pairs / seconds, 1),  # MCP's includes its clients' handshakes
        }
        if profile:
            cells[name]["profile"] = profile

    # MCP ping and tools/list: n requests spread over the agents.
    each = o.requests // len(keys)

    async def pings(client, i):
        for _ in range(each):
            await client.send_ping()

    async def lists(client, i):
        for _ in range(each):
            await client.list_tools()

    for name, body in (("mcp_ping", pings), ("mcp_list", lists)):
        # The clients' own initialize requests are outside the window: they open first.
        c0 = [None]

        async def wrapped(client, i, body=body, c0=c0):
            if c0[0] is None:
                c0[0] = cpu_seconds(pid)
            await body(client, i)

        seconds = asyncio.run(mcp_clients(url, keys, wrapped))
        per_request(name, each * len(keys), cpu_seconds(pid) - c0[0], seconds)

    # HTTP whoami.
    async def whoami():
        limits = httpx2.Limits(max_connections=len(keys) + 4, max_keepalive_connections=len(keys) + 4)
        async with httpx2.AsyncClient(timeout=60, limits=limits) as c:

            async def one(key):
                for _ in range(each):
                    r = await c.get(f"{base}/api/v1/whoami", headers={"Authorization": f"Bearer {key}"})
                    if r.status_code != 200:
                        errors.append(f"whoami {r.status_code}")

            t0 = time.monotonic()
            await asyncio.gather(*(one(k) for k in keys))
            return time.monotonic() - t0

    spent, seconds = measured(pid, lambda: asyncio.run(whoami()))
    per_request("http_whoami", each * len(keys), spent, seconds)

    # Claim + finish pairs.
    per_agent = o.pairs // len(keys)
    pairs = per_agent * len(keys)
    seen: set[str] = set()

    def handed_out(ident: str) -> None:
        if ident in seen:
            errors.append(f"double {ident}")
        seen.add(ident)

    async def mcp_pairs(client, i):
        for _ in range(per_agent):
            res = await client.call_tool("next_issue", {})
            data = json.loads(res.content[0].text)
            if res.is_error or not data.get("issue"):
                errors.append(f"mcp next {data.get('code')}")
                continue
            ident = data["issue"]["identifier"]
            handed_out(ident)
            res = await client.call_tool("save_issue", {"identifier": ident, "status": "done", "claimToken": data["claimToken"]})
            if res.is_error:
                errors.append(f"mcp done {res.content[0].text[:80]}")

    c0 = [None]

    async def mcp_wrapped(client, i):
        if c0[0] is None:
            c0[0] = cpu_seconds(pid)
        await mcp_pairs(client, i)

    seconds, profile = profiled(pid, "mcp_pair", o, lambda: asyncio.run(mcp_clients(url, keys, mcp_wrapped)))
    per_pair("mcp_pair", pairs, cpu_seconds(pid) - c0[0], seconds, profile)

    async def http_pairs():
        limits = httpx2.Limits(max_connections=len(keys) + 4, max_keepalive_connections=len(keys) + 4)
        async with httpx2.AsyncClient(timeout=60, limits=limits) as c:

            async def one(key):
                auth = {"Authorization": f"Bearer {key}"}
                for _ in range(per_agent):
                    r = await c.post(f"{base}/api/v1/work/next", json={}, headers=auth)
                    data = r.json()
                    if r.status_code != 200 or not data.get("issue"):
                        errors.append(f"http next {r.status_code}")
                        continue
                    ident = data["issue"]["identifier"]
                    handed_out(ident)
                    r = await c.patch(
                        f"{base}/api/v1/issues/{ident}", json={"status": "done", "claimToken": data["claimToken"]}, headers=auth
                    )
                    if r.status_code != 200:
                        errors.append(f"http done {r.status_code}")

            t0 = time.monotonic()
            await asyncio.gather(*(one(k) for k in keys))
            return time.monotonic() - t0

    (spent, seconds), profile = profiled(pid, "http_pair", o, lambda: measured(pid, lambda: asyncio.run(http_pairs())))
    per_pair("http_pair", pairs, spent, seconds, profile)
    cells["errors"] = errors[:10]
    cells["error_count"] = len(errors)
    return cells


def one_run(tree: Tree, o) -> dict:
    seeded, data_dir = prepare(tree, o.db_url, o.pairs * 2 + 50, o.agents)
    keys = [k["key"] for k in seeded["keys"]]
    proc, base = start(tree, o.db_url, data_dir)
    try:
        # Warm up: imports, the first connections of the pool, the MCP task group.
        asyncio.run(mcp_clients(f"{base}/mcp", keys, lambda client, i: client.list_tools()))
        return run_cells(proc.pid, base, keys, o)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db-url", required=True, help="a PostgreSQL database this bench may empty")
    p.add_argument(
        "--trees",
        default=str(ROOT),
        help="checkouts to compare, comma-separated (each with its .venv); PATH+NAME=VALUE adds "
        "environment to that checkout's server (the same checkout under two settings)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--requests", type=int, default=800, help="ping, tools/list and whoami requests per cell")
    p.add_argument("--pairs", type=int, default=400, help="claim + finish pairs per transport")
    p.add_argument("--profile", action="store_true", help="py-spy --gil on the server during the pair cells (if installed)")
    p.add_argument("--json-out")
    o = p.parse_args()
    print_header("Server CPU per request (one Daphne, PostgreSQL)")
    trees = [Tree(t) for t in o.trees.split(",")]
    results = []
    for rnd in range(o.rounds):
        order = trees if rnd % 2 == 0 else list(reversed(trees))
        for tree in order:
            cells = one_run(tree, o)
            row = {"round": rnd + 1, "tree": tree.name, "loadavg": os.getloadavg()[0], **cells}
            results.append(row)
            print(json.dumps(row), flush=True)
    if len(trees) > 1:
        print("# ratios (second tree / first tree), per round")
        for rnd in range(o.rounds):
            a, b = (next(r for r in results if r["round"] == rnd + 1 and r["tree"] == t.name) for t in trees[:2])
            ratio = {}
            for name in ("mcp_ping", "mcp_list", "http_whoami"):
                ratio[name] = round(b[name]["cpu_ms_per_request"] / a[name]["cpu_ms_per_request"], 2)
            for name in ("mcp_pair", "http_pair"):
                ratio[name] = round(b[name]["cpu_ms_per_pair"] / a[name]["cpu_ms_per_pair"], 2)
            print(json.dumps({"round": rnd + 1, **ratio}))
    if o.json_out:
        Path(o.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
