"""The scaled mode on one machine, end to end (SPEC §16): deploy/scaled.py's run.

Given nginx (its site generated from deploy/nginx/retasc.conf) in front of two Daphne
processes, a Celery worker and beat, on PostgreSQL (database ``retasc_scaled_test``) and
Redis (DB 11), all on loopback, when agents drive the work loop through the proxy over
HTTP and MCP while one Daphne process and then the worker are killed with SIGKILL, then
nothing is lost: every issue is finished exactly once, no issue was ever held twice, the
reclaim receipts arrive once the worker is back, and ``verify_chain`` passes.

The steps share one run and go in file order; each is bounded in count and time.
Database state is read with plain SQL; ``verify_chain`` runs as a command.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from deploy.scaled import ScaledRun, nginx_binary
from tests.conftest import needs_postgres
from tests.live import free_port

pytestmark = [
    pytest.mark.slow,
    needs_postgres,
    pytest.mark.skipif(not nginx_binary(), reason="needs nginx (apt-get install nginx)"),
]

DB_NAME = "retasc_scaled_test"
REDIS_DB = 11
OWNER = "owner@scaled.test"
PASSWORD = "scaled-run-test-password"  # a throwaway account in a throwaway database
ISSUES = 200
HTTP_AGENTS = 4
MCP_AGENTS = 4
IDLE_ISSUES = 5
LEASE_TTL = 5
KILL_AFTER_DONE = 60  # SIGKILL one Daphne process once this many issues are finished
DRAIN_SECONDS = 100


# --- the run --------------------------------------------------------------------------


def _pg_params() -> dict:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return {"host": db.get("HOST") or "127.0.0.1", "port": int(db.get("PORT") or 5432), "user": db.get("USER") or ""} | (
        {"password": db["PASSWORD"]} if db.get("PASSWORD") else {}
    )


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, connect_timeout=10, **_pg_params()) as conn:
        conn.execute(sql)


def _database_url() -> str:
    from urllib.parse import quote

    p = _pg_params()
    auth = quote(p["user"]) + (":" + quote(p["password"]) if "password" in p else "")
    return f"postgres://{auth}@{p['host']}:{p['port']}/{DB_NAME}"


def _redis_url() -> str:
    from urllib.parse import urlparse

    u = urlparse(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    auth = f":{u.password}@" if u.password else ""
    return f"redis://{auth}{u.hostname or '127.0.0.1'}:{u.port or 6379}/{REDIS_DB}"


def _redis_or_skip():
    import redis

    client = redis.Redis.from_url(_redis_url(), socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        if os.environ.get("REDIS_URL"):
            raise  # CI's PostgreSQL pass has Redis: not reaching it is a failure
        pytest.skip(f"needs Redis on {_redis_url()} ({exc})")
    return client


class Agents:
    """Keys and the SQL view of the run's database."""

    def __init__(self, run: ScaledRun):
        import psycopg

        self.run = run
        self.db = psycopg.connect(autocommit=True, dbname=DB_NAME, connect_timeout=10, **_pg_params())

    def q(self, sql: str, *args):
        return self.db.execute(sql, args).fetchall()

    def one(self, sql: str, *args):
        return self.q(sql, *args)[0][0]


def _manage_json(run: ScaledRun, *args: str) -> dict:
    done = run.manage(*args, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _session_keys(base: str, key: str, n: int) -> list[str]:
    """``n`` per-session child keys of ``key`` (each agent session mints its own)."""
    import httpx2

    async with httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        answers = [await c.post("/api/v1/session-keys", json={"label": f"agent {i}"}) for i in range(n)]
    assert all(r.status_code == 201 for r in answers), [r.text for r in answers]
    return [r.json()["agentKey"] for r in answers]


async def _create(base: str, key: str, titles: list[str]) -> list[str]:
    import httpx2

    sem = asyncio.Semaphore(6)
    async with httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:

        async def one(title: str) -> str:
            async with sem:
                r = await c.post("/api/v1/issues", json={"title": title, "work": True, "noDependency": "independent"})
                assert r.status_code == 201, r.text
                return r.json()["identifier"]

        return list(await asyncio.gather(*(one(t) for t in titles)))


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    redis_client = _redis_or_skip()
    redis_client.flushdb()
    _pg_admin(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    _pg_admin(f'CREATE DATABASE "{DB_NAME}"')
    web_ports = [free_port(), free_port()]
    run = ScaledRun(
        database_url=_database_url(),
        redis_url=_redis_url(),
        workdir=tmp_path_factory.mktemp("scaled"),
        port=free_port(),
        web_ports=web_ports,
        extra_env={
            "RETASC_RECLAIM_INTERVAL_SECONDS": "1",
            "RETASC_API_RATE": "100000/min",  # eight agents on one machine, not a rate-limit test
            "RETASC_DB_POOL_SIZE": "8",  # 2 x 8: PostgreSQL is shared with the other test runs
            "RETASC_LOG_LEVEL": "WARNING",
        },
    )
    agents = None
    try:
        run.up()
        boot = ("bootstrap", "--org", "Scaled", "--email", OWNER, "--password", PASSWORD, "--lease-ttl", str(LEASE_TTL))
        agents = Agents(run)
        agents.owner_key = _manage_json(run, *boot, "--project", "WORK")["agentKey"]
        # The second project (its own lane) is made while the first fills up.
        with ThreadPoolExecutor(1) as pool:
            idle = pool.submit(_manage_json, run, *boot, "--project", "IDLE")
            keys = asyncio.run(_session_keys(run.base, agents.owner_key, HTTP_AGENTS + MCP_AGENTS))
            agents.http_keys, agents.mcp_keys = keys[:HTTP_AGENTS], keys[HTTP_AGENTS:]
            agents.work = asyncio.run(_create(run.base, agents.owner_key, [f"Task {i}" for i in range(ISSUES)]))
            agents.idle_key = idle.result()["agentKey"]
        agents.taker_key = asyncio.run(_session_keys(run.base, agents.idle_key, 1))[0]
        agents.idle = asyncio.run(_create(run.base, agents.idle_key, [f"Idle {i}" for i in range(IDLE_ISSUES)]))
        yield agents
    finally:
        if agents:
            agents.db.close()
        run.down()
        _pg_admin(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        redis_client.flushdb()


def _tails(run: ScaledRun, n: int = 1500) -> str:
    return "\n".join(f"== {p.log_path.name}\n{p.log()[-n:]}" for p in run.procs.values())


def _access_log(run: ScaledRun) -> list[str]:
    path = run.workdir / "nginx" / "logs" / "access.log"
    return path.read_text().splitlines() if path.exists() else []


# --- 1. the proxy ----------------------------------------------------------------------


def test_the_proxy_serves_health_static_files_and_caps_bodies(scaled):
    import httpx2

    run = scaled.run
    with httpx2.Client(base_url=run.base, timeout=30) as c:
        health = c.get("/api/health", headers={"X-Forwarded-For": "203.0.113.7"})
        assert health.status_code == 200
        assert health.json()["checks"] == {"database": "ok", "redis": "ok"}

        css = next((run.data_dir / "static" / "dash").glob("*.css"))
        static = c.get(f"/static/dash/{css.name}")
        assert static.status_code == 200 and static.content == css.read_bytes()

        big = b"x" * (1536 * 1024)  # over the 1 MiB cap, under /mcp's 2 MiB
        refused = c.post("/api/v1/issues", content=big, headers={"Content-Type": "application/json"})
        assert refused.status_code == 413 and refused.headers["server"].startswith("nginx")
        passed = c.post("/mcp", content=big, headers={"Content-Type": "application/json"})
        assert (passed.status_code, _code(passed)) == (401, "UNAUTHORIZED")  # /mcp's cap is 2 MiB: the app answered

    log = _access_log(run)
    # Static files come from the collectstatic directory, never from Daphne.
    assert any(f"/static/dash/{css.name} " in line and "upstream=- " in line for line in log), log[-5:]
    assert not any(f"/static/dash/{css.name}" in p.log() for name, p in run.procs.items() if name.startswith("web-"))
    # nginx overwrites X-Forwarded-For: a client cannot choose the address Daphne logs.
    assert not any("203.0.113.7" in p.log() for name, p in run.procs.items() if name.startswith("web-"))


# --- 2. the Dash's live feed across processes ------------------------------------------


def _login(base: str) -> str:
    """Sign in through the proxy with the form, as a browser does; the session cookie."""
    import httpx2

    with httpx2.Client(base_url=base, timeout=30, follow_redirects=True) as c:
        page = c.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        done = c.post(
            "/accounts/login/",
            data={"login": OWNER, "password": PASSWORD, "csrfmiddlewaretoken": token},
            headers={"Origin": base, "Referer": f"{base}/accounts/login/"},
        )
        assert done.status_code == 200, done.text[:500]
        assert c.get("/queue/").status_code == 200  # the Dash picks the current org
        return c.cookies["sessionid"]


class Socket:
    """A browser's websocket to /ws/org/ (RFC 6455, text frames only, enough for JSON)."""

    def __init__(self, port: int, origin: str, cookie: str):
        self.port, self.origin, self.cookie = port, origin, cookie

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 5)
        key = base64.b64encode(os.urandom(16)).decode()
        self.writer.write(
            (
                f"GET /ws/org/ HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {self.origin}\r\n"
                f"Cookie: sessionid={self.cookie}\r\n\r\n"
            ).encode()
        )
        status = await asyncio.wait_for(self.reader.readline(), 10)
        while (await asyncio.wait_for(self.reader.readline(), 10)) not in (b"\r\n", b""):
            pass
        assert b" 101 " in status, status

    async def receive(self, timeout: float) -> dict:
        while True:
            head = await asyncio.wait_for(self.reader.readexactly(2), timeout)
            opcode, n = head[0] & 0x0F, head[1] & 0x7F
            if n == 126:
                n = int.from_bytes(await self.reader.readexactly(2), "big")
            elif n == 127:
                n = int.from_bytes(await self.reader.readexactly(8), "big")
            data = await self.reader.readexactly(n)
            if opcode == 1:
                return json.loads(data)
            assert opcode != 8, "the server closed the socket"

    def close(self) -> None:
        self.writer.write(b"\x88\x80" + os.urandom(4))  # a close frame (masked, as clients must), no payload
        self.writer.close()


def test_a_dash_socket_sees_a_claim_made_through_the_other_process(scaled):
    import httpx2

    run = scaled.run
    cookie = _login(run.base)
    claimed: dict[int, str] = {}  # web port -> issue claimed through it
    seen: list[dict] = []

    async def scenario():
        ws = Socket(run.port, run.base, cookie)
        await ws.open()  # through nginx: lands on one of the two Daphne processes
        hello = await ws.receive(10)
        assert "org" in hello
        auth = {"Authorization": f"Bearer {scaled.owner_key}"}
        for port in run.web_ports:  # one claim through each process, past the proxy
            async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=30) as c:
                d = (await c.post("/api/v1/work/next", json={})).json()
                claimed[port] = d["issue"]["identifier"]
                r = await c.patch(f"/api/v1/issues/{claimed[port]}", json={"status": "done", "claimToken": d["claimToken"]})
                assert r.status_code == 200, r.text
        deadline = time.monotonic() + 15
        want = {("claimed", ident) for ident in claimed.values()}
        while time.monotonic() < deadline and not want <= {(e["verb"], e["issue"]) for e in seen}:
            try:
                message = await ws.receive(max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break  # the assertion below says what was missing
            seen.extend(message.get("events", []) if message.get("type") == "events" else [])
        ws.close()

    asyncio.run(scenario())
    got = {(e["verb"], e["issue"]) for e in seen}
    assert {("claimed", ident) for ident in claimed.values()} <= got, seen
    # nginx logs the socket when it closes: which process held it. The claim made through
    # the other one reached it through the Redis channel layer.
    deadline = time.monotonic() + 5
    while not (lines := [ln for ln in _access_log(run) if '"GET /ws/org/ ' in ln]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lines and " 101 " in lines[-1], lines
    holder = int(re.search(r"upstream=127\.0\.0\.1:(\d+)", lines[-1]).group(1))
    other = next(p for p in run.web_ports if p != holder)
    assert ("claimed", claimed[other]) in got


# --- 3. the work loop through the proxy, one Daphne killed mid-drain ----------------------


def _code(r) -> str | None:
    try:
        return (r.json() or {}).get("code")
    except ValueError:
        return None


async def _http_agent(base: str, key: str, stats: Counter, deadline: float) -> None:
    """next -> checkpoint -> done over /api/v1, retrying what the proxy or a dying
    process refused; stops when nothing is ready and nothing is held."""
    import httpx2

    async with httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        while time.monotonic() < deadline:
            try:
                r = await c.post("/api/v1/work/next", json={})
            except httpx2.HTTPError as exc:
                stats[f"http next {type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)
                continue
            if r.status_code != 200:
                stats[f"http next {r.status_code} {_code(r)}"] += 1
                await asyncio.sleep(0.2)
                continue
            d = r.json()
            if d["issue"] is None:
                if d["claimed"] == 0:
                    return
                await asyncio.sleep(0.5)  # a lease still held (its answer lost to a kill): wait for it
                continue
            ident, token = d["issue"]["identifier"], d["claimToken"]
            r = await _retry(c, stats, "post", f"/api/v1/issues/{ident}/checkpoint", {"note": "half way", "claimToken": token})
            if r is not None and r.status_code == 200:
                r = await _retry(c, stats, "patch", f"/api/v1/issues/{ident}", {"status": "done", "claimToken": token})
            if r is not None and r.status_code == 200:
                stats["done"] += 1
                stats["http done"] += 1
            else:  # e.g. CLAIM_LOST once the lease lapsed: its next holder finishes it
                stats[f"http gave up {getattr(r, 'status_code', None)} {_code(r) if r is not None else None}"] += 1


async def _retry(c, stats: Counter, method: str, path: str, body: dict):
    """The request, repeated while the proxy or a dying process fails it (bounded); the
    last answer, or None when none came."""
    import httpx2

    r = None
    for _ in range(30):
        try:
            r = await getattr(c, method)(path, json=body)
        except httpx2.HTTPError as exc:
            stats[f"http {method} {type(exc).__name__}"] += 1
            await asyncio.sleep(0.3)
            continue
        if r.status_code < 500:
            return r
        stats[f"http {method} {r.status_code} {_code(r)}"] += 1
        await asyncio.sleep(0.3)
    return r


async def _mcp_agent(url: str, key: str, stats: Counter, deadline: float) -> None:
    """The same loop over MCP with the SDK's client. A transport failure ends the
    session; the agent opens a new one (any process can serve it: /mcp is stateless) and
    repeats the call it had in flight."""
    from tests.mcp.conftest import mcp_client

    pending: tuple[str, str] | None = None  # (identifier, claim token) to finish
    while time.monotonic() < deadline:
        try:
            async with mcp_client(url, key) as client:
                while time.monotonic() < deadline:
                    if pending:
                        ident, token = pending
                        result = await asyncio.wait_for(
                            client.call_tool("save_issue", {"identifier": ident, "status": "done", "claimToken": token}), 30
                        )
                        pending = None
                        if result.is_error:
                            stats[f"mcp done refused {json.loads(result.content[0].text)['code']}"] += 1
                        else:
                            stats["done"] += 1
                            stats["mcp done"] += 1
                        continue
                    result = await asyncio.wait_for(client.call_tool("next_issue", {}), 30)
                    d = json.loads(result.content[0].text)
                    if result.is_error:
                        stats[f"mcp next refused {d['code']}"] += 1
                        await asyncio.sleep(0.3)
                    elif d["issue"] is None:
                        if d["claimed"] == 0:
                            return
                        await asyncio.sleep(0.5)
                    else:
                        pending = (d["issue"]["identifier"], d["claimToken"])
        except Exception as exc:  # noqa: BLE001 - any transport failure: reconnect and retry
            stats[f"mcp session {type(exc).__name__}"] += 1
            await asyncio.sleep(0.3)


def test_agents_drain_through_the_proxy_while_a_web_process_is_killed(scaled):
    run = scaled.run
    stats: Counter = Counter()
    victim = run.web_ports[0]
    marks: dict = {}

    async def killer():
        while stats["done"] < KILL_AFTER_DONE and time.monotonic() < marks["deadline"]:
            await asyncio.sleep(0.05)
        marks["done_at_kill"] = stats["done"]
        await asyncio.to_thread(run.procs[f"web-{victim}"].kill9)

    async def scenario():
        marks["deadline"] = time.monotonic() + DRAIN_SECONDS
        tasks = [_http_agent(run.base, key, stats, marks["deadline"]) for key in scaled.http_keys]
        tasks += [_mcp_agent(f"{run.base}/mcp", key, stats, marks["deadline"]) for key in scaled.mcp_keys]
        await asyncio.gather(killer(), *tasks)

    t0 = time.monotonic()
    asyncio.run(scenario())
    print(f"\ndrain: {round(time.monotonic() - t0, 1)} s, {dict(stats)}, killed web {victim} at {marks['done_at_kill']} done")
    not_done = scaled.one(
        "SELECT count(*) FROM issues_issue i JOIN orgs_project p ON p.id = i.project_id WHERE p.prefix = 'WORK' AND i.status <> 'done'"
    )
    assert not_done == 0, (dict(stats), _tails(run))
    assert marks["done_at_kill"] >= KILL_AFTER_DONE and stats["done"] > marks["done_at_kill"]
    assert stats["http done"] > 0 and stats["mcp done"] > 0
    assert not run.procs[f"web-{victim}"].alive() and run.procs[f"web-{run.web_ports[1]}"].alive()

    # nginx found the dead process refusing connections and passed the request on: a line
    # naming both upstreams. Health checks after its fail_timeout show it if the drain did not.
    rerouted = f"upstream=127.0.0.1:{victim}, 127.0.0.1:{run.web_ports[1]} "
    deadline = time.monotonic() + 15
    import urllib.request

    while not any(rerouted in line for line in _access_log(run)) and time.monotonic() < deadline:
        with urllib.request.urlopen(f"{run.base}/api/health", timeout=10) as resp:
            assert resp.status == 200
        time.sleep(0.5)
    assert any(rerouted in line for line in _access_log(run))


# --- 4. the Celery worker killed and restarted ------------------------------------------


def test_reclaim_receipts_arrive_after_the_worker_is_killed_and_restarted(scaled):
    import httpx2

    run = scaled.run

    def idle_rows() -> list[tuple]:
        """(identifier number, status, lease expired?, system 'reclaimed' receipts) per IDLE issue."""
        return scaled.q(
            "SELECT i.number, i.status, i.lease_expires_at <= now(),"
            " (SELECT count(*) FROM issues_activity a WHERE a.issue_id = i.id AND a.verb = 'reclaimed' AND a.runtime = 'system')"
            " FROM issues_issue i JOIN orgs_project p ON p.id = i.project_id WHERE p.prefix = 'IDLE' ORDER BY 1"
        )

    def wait_for(pred, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.25)
        return pred()

    auth = {"Authorization": f"Bearer {scaled.idle_key}"}
    with httpx2.Client(base_url=run.base, headers=auth, timeout=30) as c:
        # The worker (fed by beat) writes the receipt of a lease its holder walked away from.
        first = c.post("/api/v1/work/next", json={}).json()["issue"]["identifier"]
        number = int(first.split("-")[1])
        assert wait_for(lambda: any(r[0] == number and r[3] == 1 for r in idle_rows()), 30), (idle_rows(), _tails(run))

        run.procs["worker"].kill9()
        held = c.post("/api/v1/work/batch", json={"n": IDLE_ISSUES, "claim": True}).json()["claims"]
        assert len(held) == IDLE_ISSUES
        time.sleep(LEASE_TTL + 3)
        rows = idle_rows()
        # Expired, and no receipt: with the worker dead no job ran (beat only queued them).
        assert all(r[1] == "doing" and r[2] for r in rows), rows
        assert sum(r[3] for r in rows) == 1, rows

    run.start_worker()
    caught_up = wait_for(lambda: all(r[1] == "todo" and r[3] == (2 if r[0] == number else 1) for r in idle_rows()), 60)
    assert caught_up, (idle_rows(), _tails(run))

    taker = {"Authorization": f"Bearer {scaled.taker_key}"}
    with httpx2.Client(base_url=run.base, headers=taker, timeout=30) as c:
        for _ in range(IDLE_ISSUES):
            d = c.post("/api/v1/work/next", json={}).json()
            assert d["reclaimCount"] >= 1
            r = c.patch(f"/api/v1/issues/{d['issue']['identifier']}", json={"status": "done", "claimToken": d["claimToken"]})
            assert r.status_code == 200, r.text
        assert c.post("/api/v1/work/next", json={}).json()["issue"] is None


# --- 5. nothing lost, nothing twice -------------------------------------------------------


def test_every_issue_was_finished_exactly_once_and_the_chain_verifies(scaled):
    issues = ISSUES + IDLE_ISSUES
    assert scaled.one("SELECT count(*) FROM issues_issue") == issues
    assert scaled.one("SELECT count(*) FROM issues_issue WHERE status = 'done' AND closed_at IS NOT NULL") == issues
    # One 'finished' receipt per issue: none lost, none finished twice.
    assert (
        scaled.q(
            "SELECT i.id, count(a.id) FROM issues_issue i LEFT JOIN issues_activity a ON a.issue_id = i.id AND a.verb = 'finished'"
            " GROUP BY i.id HAVING count(a.id) <> 1"
        )
        == []
    )
    # No two claims on one issue were ever live at once (a claim lives from its creation
    # until it ended or expired, whichever came first); none is live now.
    assert (
        scaled.q(
            "SELECT a.id, b.id FROM leases_claim a JOIN leases_claim b ON a.issue_id = b.issue_id AND a.id < b.id"
            " WHERE b.created_at < LEAST(COALESCE(a.ended_at, a.expires_at), a.expires_at)"
            "   AND a.created_at < LEAST(COALESCE(b.ended_at, b.expires_at), b.expires_at)"
        )
        == []
    )
    assert scaled.one("SELECT count(*) FROM leases_claim WHERE ended_at IS NULL AND expires_at > now()") == 0
    assert scaled.one("SELECT count(*) FROM issues_issue WHERE lease_claim_id IS NOT NULL") == 0
    # Every reclaim is counted on its issue and has exactly one receipt.
    assert (
        scaled.q(
            "SELECT i.id FROM issues_issue i WHERE i.reclaim_count <>"
            " (SELECT count(*) FROM issues_activity a WHERE a.issue_id = i.id AND a.verb = 'reclaimed')"
        )
        == []
    )
    done = scaled.run.manage("verify_chain")
    assert done.returncode == 0, done.stdout + done.stderr
