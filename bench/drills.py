"""Fault drills. Exit status 1 when anything is lost, held twice or finished twice.

    .venv/bin/python -m bench.drills                 # all drills, the issue's sizes
    .venv/bin/python -m bench.drills --only kill9,pg_restart

Every drill seeds its own database (``retasc_drill_…``, dropped afterwards), runs its
servers on 127.0.0.1 only, bounds every loop by count and time, and checks at the end
that every issue is done exactly once (one ``finished`` receipt each), that no two claims
on one issue were ever live at the same time, that each issue's reclaim count matches its
``reclaimed`` receipts, and (where it matters) that ``verify_chain`` passes.

* ``kill9``: 32 agent *processes* drain 2,000 issues (lease TTL 5 s); agents are
  ``kill -9``-ed mid-claim (after their checkpoint, before done) and replaced. Every
  issue whose holder was killed after its checkpoint must be handed out again with
  ``resumed: true``, that checkpoint and ``reclaimCount >= 1``.
* ``pg_restart``: a private PostgreSQL cluster (``initdb`` into a temp dir, ``pg_ctl`` on
  port 5440+) is stopped mid-drain, stays down ``--pg-down`` s and starts again. The same
  Daphne process must recover; agents may only see JSON ``503 UNAVAILABLE`` (or a
  connection error), never a 500.
* ``redis_stop``: a private redis-server (port 6390+) carries the channel layer and the
  cache; it is stopped mid-drain for ``--redis-down`` s and restarted empty. The work
  loop must keep going while it is down; an open Dash page (a websocket to ``/ws/org/``
  with a signed-in session) must get live events before, and again after the restart.
* ``no_celery``: no Celery worker, no Redis, no in-process jobs: an abandoned lease
  expires and the next ``next_issue`` hands the issue out again (resumed from its checkpoint).
* ``celery_worker``: a real ``celery -A retasc`` beat and worker on the private Redis; the
  worker is ``kill -9``-ed mid-drain and restarted. While it is dead, expired leases get
  no receipt yet dispatch hands them out; once it is back the receipts catch up.
* ``sigterm``: SIGTERM to Daphne mid-drain (32 agents): requests in flight finish, new
  ones get ``503 UNAVAILABLE``, the process exits; a fresh Daphne then finishes the drain.
* ``notify``: notification delivery with a real Celery worker and beat on a private Redis
  and a fake Telegram on 127.0.0.1. Issues are finished (each one a message to its
  author); the worker is ``kill -9``-ed mid-delivery, Redis is stopped while more issues
  are finished, and the provider is down when the worker comes back. At the end every
  outbox row has its delivery ``sent`` (none pending or dead) and the provider holds each
  message once (one idempotency key each), though a killed worker's message went twice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench.common import PY, ROOT, Instance, new_instance, print_header, seed, start_daphne

RESULTS: list[dict] = []
DB_PREFIX = "retasc_drill"  # every database and temp dir a drill makes starts with this


def result(name: str, ok: bool, **details) -> dict:
    row = {"drill": name, "ok": bool(ok), **details}
    RESULTS.append(row)
    print(json.dumps(row, default=str), flush=True)
    return row


def db_state(db_url: str, prefix: str | None = None) -> dict:
    """Counts from the database; ``prefix`` limits the issue counts to one project."""
    import psycopg

    issues = "issues_issue i JOIN orgs_project p ON p.id = i.project_id WHERE i.source = 'bench'"
    args: tuple = ()
    if prefix:
        issues += " AND p.prefix = %s"
        args = (prefix,)
    with psycopg.connect(db_url.replace("postgres://", "postgresql://"), connect_timeout=10) as conn:
        q = lambda sql, *a: conn.execute(sql, a).fetchone()[0]  # noqa: E731
        return {
            "issues": q(f"SELECT count(*) FROM {issues}", *args),
            "done": q(f"SELECT count(*) FROM {issues} AND i.status = 'done'", *args),
            "not_done": q(f"SELECT count(*) FROM {issues} AND i.status <> 'done'", *args),
            "finished_twice": q(
                "SELECT count(*) FROM (SELECT issue_id FROM issues_activity WHERE verb='finished'"
                " GROUP BY issue_id HAVING count(*) > 1) x"
            ),
            "finished_receipts": q(
                f"SELECT count(*) FROM issues_activity a WHERE a.verb = 'finished' AND a.issue_id IN (SELECT i.id FROM {issues})",
                *args,
            ),
            "held_twice": q(
                "SELECT count(*) FROM (SELECT issue_id FROM leases_claim WHERE ended_at IS NULL"
                " AND expires_at > now() GROUP BY issue_id HAVING count(*) > 1) x"
            ),
            # over the whole run: two claims on one issue whose live spans overlap (a claim
            # lives from created_at until it ended or expired, whichever came first)
            "held_twice_ever": q(
                "SELECT count(*) FROM leases_claim a JOIN leases_claim b ON a.issue_id = b.issue_id AND a.id < b.id"
                " WHERE b.created_at < LEAST(COALESCE(a.ended_at, a.expires_at), a.expires_at)"
                "   AND a.created_at < LEAST(COALESCE(b.ended_at, b.expires_at), b.expires_at)"
            ),
            "reclaimed_issues": q("SELECT count(*) FROM issues_issue WHERE reclaim_count > 0"),
            "reclaimed_receipts": q("SELECT count(*) FROM issues_activity WHERE verb='reclaimed'"),
            # every reclaim is counted on the issue and has its receipt
            "reclaim_count_vs_receipts_mismatch": q(
                "SELECT count(*) FROM issues_issue i WHERE i.reclaim_count <>"
                " (SELECT count(*) FROM issues_activity a WHERE a.issue_id = i.id AND a.verb = 'reclaimed')"
            ),
        }


def state_ok(state: dict, seeded: int) -> bool:
    """Every issue done exactly once (one ``finished`` receipt each), never held twice."""
    return (
        state["issues"] == seeded
        and state["not_done"] == 0
        and state["finished_receipts"] == seeded
        and state["finished_twice"] == 0
        and state["held_twice"] == 0
        and state["held_twice_ever"] == 0
        and state["reclaim_count_vs_receipts_mismatch"] == 0
    )


def verify_chain(inst: Instance) -> tuple[bool, str]:
    proc = subprocess.run(
        [PY, "manage.py", "verify_chain"], cwd=ROOT, env=inst.env(), capture_output=True, text=True, timeout=600
    )
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()[-300:]


# --- an agent process (python -m bench.drills agent ...) -------------------------------


def agent_main(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--work-seconds", type=float, default=0.3)
    p.add_argument("--deadline", type=float, required=True, help="epoch seconds to stop at")
    o = p.parse_args(argv)
    import httpx2

    log = open(o.log, "a", buffering=1)

    def emit(ev: str, **fields) -> None:
        log.write(json.dumps({"ev": ev, "t": round(time.time(), 3), **fields}) + "\n")

    def code_of(r) -> str | None:
        try:
            return (r.json() or {}).get("code")
        except ValueError:
            return None

    auth = {"Authorization": f"Bearer {o.key}"}
    empty, reason = 0, "deadline"
    with httpx2.Client(base_url=o.base, headers=auth, timeout=30) as c:
        while time.time() < o.deadline:
            try:
                r = c.post("/api/v1/work/next", json={})
            except Exception:  # noqa: BLE001
                time.sleep(0.2)
                continue
            if r.status_code != 200:
                time.sleep(0.2)
                continue
            d = r.json()
            if d["issue"] is None:
                empty += 1
                if d.get("claimed", 0) == 0:
                    reason = "drained"  # nothing ready, nothing held
                    break
                if empty > 200:
                    reason = "gave_up"
                    break
                time.sleep(0.5)  # issues still held (maybe by a dead agent): wait for the lease
                continue
            empty = 0
            ident, tok = d["issue"]["identifier"], d["claimToken"]
            emit("claimed", id=ident, resumed=d["resumed"], checkpoint=d["checkpoint"], reclaimCount=d["reclaimCount"])
            note = f"step 1 of {ident} by pid {os.getpid()}"
            try:
                r = c.post(f"/api/v1/issues/{ident}/checkpoint", json={"note": note, "claimToken": tok})
                emit("checkpoint", id=ident, note=note, status=r.status_code)
            except Exception as exc:  # noqa: BLE001
                emit("checkpoint", id=ident, note=note, status=None, error=type(exc).__name__)
            time.sleep(o.work_seconds * random.uniform(0.5, 1.5))
            emit("finishing", id=ident)  # the done request goes out now (a kill from here may or may not land it)
            r = None
            for _ in range(5):
                try:
                    r = c.patch(f"/api/v1/issues/{ident}", json={"status": "done", "claimToken": tok})
                except Exception:  # noqa: BLE001
                    time.sleep(0.2)
                    continue
                if r.status_code < 500:
                    break
                time.sleep(0.2)
            status = r.status_code if r is not None else None
            emit("done", id=ident, status=status, code=code_of(r) if r is not None and status != 200 else None)
    emit("exit", reason=reason)


# --- async agents (in-process, for the server-side drills) -----------------------------


def _code(r) -> str | None:
    """The ``code`` of a JSON refusal; None for anything else (an HTML 500 page)."""
    if not r.headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        return (r.json() or {}).get("code")
    except ValueError:
        return None


async def drain(base: str, keys: list[str], n: int, seconds: float, stats: Counter, seen: Counter, stop=None) -> None:
    """n agents pull -> done until nothing is ready or held, retrying on errors."""
    import httpx2

    deadline = time.monotonic() + seconds
    limits = httpx2.Limits(max_connections=n + 4)

    async def agent(key):
        auth = {"Authorization": f"Bearer {key}"}
        empty = 0
        async with httpx2.AsyncClient(base_url=base, headers=auth, timeout=20, limits=limits) as c:
            while time.monotonic() < deadline and not (stop and stop.is_set()):
                try:
                    r = await c.post("/api/v1/work/next", json={})
                except Exception as exc:  # noqa: BLE001
                    stats[f"next:{type(exc).__name__}"] += 1
                    await asyncio.sleep(0.2)
                    continue
                if r.status_code != 200:
                    stats[f"next:{r.status_code}:{_code(r)}"] += 1
                    await asyncio.sleep(0.2)
                    continue
                d = r.json()
                if d["issue"] is None:
                    empty += 1
                    if d.get("claimed", 0) == 0 or empty > 100:
                        return
                    await asyncio.sleep(0.5)
                    continue
                empty = 0
                ident, tok = d["issue"]["identifier"], d["claimToken"]
                seen[ident] += 1
                stats["claims"] += 1
                for _attempt in range(20):
                    try:
                        r = await c.patch(f"/api/v1/issues/{ident}", json={"status": "done", "claimToken": tok})
                    except Exception as exc:  # noqa: BLE001
                        stats[f"done:{type(exc).__name__}"] += 1
                        await asyncio.sleep(0.3)
                        continue
                    if r.status_code == 200:
                        stats["done"] += 1
                        break
                    code = _code(r)
                    stats[f"done:{r.status_code}:{code}"] += 1
                    if r.status_code < 500 and code not in ("UNAVAILABLE",):
                        break  # e.g. CLAIM_LOST after a lease expired: the next holder finishes it
                    await asyncio.sleep(0.3)

    await asyncio.gather(*(agent(keys[i % len(keys)]) for i in range(n)))


async def until_mid_drain(o, stats: Counter, issues: int) -> None:
    """Wait until the drain is under way: ``--fault-frac`` of the issues done (and at least
    ``--fault-after`` seconds), bounded by half of ``--drain-seconds``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < o.drain_seconds / 2:
        if time.monotonic() - t0 >= o.fault_after and stats["done"] >= o.fault_frac * issues:
            return
        await asyncio.sleep(0.1)


# --- drills ---------------------------------------------------------------------------


def _last_event(path: str) -> dict:
    """The last complete line of an agent log (read from its tail only)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 1024))
            tail = f.read().decode(errors="replace")
    except OSError:
        return {}
    lines = tail.splitlines() if tail.endswith("\n") else tail.splitlines()[:-1]
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}


def _events(path: str) -> list[dict]:
    out = []
    for line in _lines(path):
        try:
            out.append(json.loads(line))
        except ValueError:  # the line a kill cut short
            continue
    return out


def drill_kill9(o) -> None:
    inst = new_instance("postgres", lease_ttl=5, prefix="BENCH", db_prefix=DB_PREFIX)
    server = None
    procs: list[subprocess.Popen] = []
    logdir = tempfile.mkdtemp(prefix=f"{DB_PREFIX.replace('_', '-')}-kill9-")
    try:
        s = seed(inst, projects=["BENCH"], issues=o.kill_issues, keys=o.agents)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        t_start = time.time()
        deadline = t_start + o.kill_seconds
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        def spawn(i):
            log = os.path.join(logdir, f"agent-{i}-{len(procs)}.jsonl")
            proc = subprocess.Popen(
                [
                    PY,
                    "-m",
                    "bench.drills",
                    "agent",
                    "--base",
                    server.base,
                    "--key",
                    keys[i % len(keys)],
                    "--log",
                    log,
                    "--deadline",
                    str(deadline),
                ],
                cwd=ROOT,
                env=env,
            )
            proc.log = log
            procs.append(proc)
            return proc

        live = {i: spawn(i) for i in range(o.agents)}
        kills, killed_logs, skipped = 0, [], 0
        time.sleep(3)
        while time.time() < deadline and any(p.poll() is None for p in live.values()):
            time.sleep(o.kill_every)
            if kills >= o.kills:
                continue
            # kill only mid-claim: an agent whose last logged event is a checkpoint is
            # "working" (its done not sent yet); wait up to 5 s for one to be in that state
            victim_i, until = None, time.time() + 5
            while victim_i is None and time.time() < until:
                ready = [i for i, p in live.items() if p.poll() is None and _last_event(p.log).get("ev") == "checkpoint"]
                if ready:
                    victim_i = random.choice(ready)
                else:
                    time.sleep(0.02)
            if victim_i is None:
                skipped += 1
                continue
            victim = live[victim_i]
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            kills += 1
            killed_logs.append(victim.log)
            live[victim_i] = spawn(victim_i)
        for p in procs:
            try:
                p.wait(max(1, deadline - time.time() + 5))
            except subprocess.TimeoutExpired:
                p.kill()
        wall = time.time() - t_start
        survivors = [p for p in procs if p.log not in killed_logs]
        exits = Counter(_last_event(p.log).get("reason", f"rc={p.returncode}") for p in survivors)
        timed_out = set(exits) != {"drained"}
        # what the killed agents held after their checkpoint (claimed + checkpointed, no done logged)
        orphaned, victim_claims = {}, Counter()
        for log in killed_logs:
            open_ = {}
            for ev in _events(log):
                if ev["ev"] == "claimed":
                    victim_claims[ev["id"]] += 1
                elif ev["ev"] == "checkpoint" and ev["status"] == 200:
                    open_[ev["id"]] = ev["note"]
                elif ev["ev"] == "done":
                    open_.pop(ev["id"], None)
            orphaned.update(open_)
        claims_by_id: dict = {}
        done_ok = Counter()
        t_first = t_last = None
        for p in procs:
            for ev in _events(p.log):
                if ev["ev"] == "claimed":
                    claims_by_id.setdefault(ev["id"], []).append(ev)
                    t_first = ev["t"] if t_first is None else min(t_first, ev["t"])
                elif ev["ev"] == "done" and ev["status"] == 200:
                    done_ok[ev["id"]] += 1
                    t_last = ev["t"] if t_last is None else max(t_last, ev["t"])
        state = db_state(inst.db_url)
        import psycopg

        with psycopg.connect(inst.db_url.replace("postgres://", "postgresql://")) as conn:
            rows = conn.execute("SELECT number, reclaim_count, status FROM issues_issue WHERE source='bench'").fetchall()
        by_ident = {f"BENCH-{n}": (rc, st) for n, rc, st in rows}
        resumed_ok, resumed_bad, victim_done_landed = 0, [], 0
        for ident, note in orphaned.items():
            later = [
                c for c in claims_by_id.get(ident, []) if c["resumed"] and c["checkpoint"] == note and c["reclaimCount"] >= 1
            ]
            if later:
                resumed_ok += 1
            elif by_ident.get(ident) == (0, "done") and len(claims_by_id.get(ident, [])) == 1:
                victim_done_landed += 1  # its done was on the wire when it died and committed: nothing to resume
            else:
                resumed_bad.append(ident)
        # handed out while held: every claim beyond the first must follow a killed holder's claim
        handed_out_twice = [i for i, cl in claims_by_id.items() if len(cl) > 1 + victim_claims.get(i, 0)]
        done_twice = [i for i, n in done_ok.items() if n > 1]
        chain_ok, chain_msg = verify_chain(inst)
        ok = (
            state_ok(state, o.kill_issues)
            and not resumed_bad
            and not handed_out_twice
            and not done_twice
            and kills > 0
            and resumed_ok > 0
            and not timed_out
            and chain_ok
        )
        result(
            "kill9",
            ok,
            seeded=o.kill_issues,
            agents=o.agents,
            kills=kills,
            kill_attempts_skipped=skipped,
            orphaned_after_checkpoint=len(orphaned),
            resumed_from_checkpoint=resumed_ok,
            victim_done_landed=victim_done_landed,
            not_resumed=resumed_bad[:10],
            handed_out_twice=handed_out_twice[:10],
            done_twice_by_agents=done_twice[:10],
            timed_out=timed_out,
            agent_exits=dict(exits),
            drain_seconds=round(t_last - t_first, 1) if t_first and t_last else None,
            wall_seconds=round(wall, 1),
            verify_chain=chain_ok,
            **({} if chain_ok else {"verify_chain_output": chain_msg}),
            **state,
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if server:
            server.stop()
        inst.drop(remove_data_dir=True)
        shutil.rmtree(logdir, ignore_errors=True)


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:  # killed before it wrote anything
        return []


def _free_tcp(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class PrivatePostgres:
    """A throw-away PostgreSQL cluster: ``initdb`` into a temp dir, ``pg_ctl`` on its own
    port, loopback and its own socket dir only. Never touches the shared cluster."""

    def __init__(self, port: int):
        self.port = port
        self.dir = tempfile.mkdtemp(prefix=f"{DB_PREFIX.replace('_', '-')}-pg-")
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "server.log")
        self.as_postgres = os.geteuid() == 0  # initdb refuses to run as root
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self.started = False

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [_pg_bin(args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout)

    def init(self) -> None:
        self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.dir}'\n"
                "fsync = off\nsynchronous_commit = off\nmax_connections = 100\n"
            )

    def ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", self.data, "-l", self.logfile, "-w", "-t", "60", *args)

    def start(self) -> None:
        self.ctl("start")
        self.started = True

    def stop(self, mode: str = "fast") -> None:
        self.ctl("stop", "-m", mode)

    def destroy(self) -> None:
        if self.started:
            try:
                self.ctl("stop", "-m", "immediate")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass  # already stopped
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for cand in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(cand)
    raise RuntimeError(f"{name} not found (install the PostgreSQL server binaries)")


def drill_pg_restart(o) -> None:
    port = next(p for p in range(o.pg_port, o.pg_port + 50) if _free_tcp(p))
    pg = PrivatePostgres(port)
    server = inst = None
    try:
        pg.init()
        pg.start()
        inst = new_instance("postgres", lease_ttl=5, pg_port=port, prefix="BENCH", db_prefix=DB_PREFIX)
        s = seed(inst, projects=["BENCH"], issues=o.pg_issues, keys=o.agents)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        pid = server.pid
        stats, seen = Counter(), Counter()

        async def run():
            task = asyncio.create_task(drain(server.base, keys, o.agents, o.drain_seconds, stats, seen))
            await until_mid_drain(o, stats, o.pg_issues)
            before = stats["done"]
            t0 = time.monotonic()
            # stop (fast: open connections are cut mid-transaction), stay down, start again
            await asyncio.to_thread(pg.stop, "fast")
            await asyncio.sleep(o.pg_down)
            await asyncio.to_thread(pg.start)
            outage = time.monotonic() - t0
            await task
            return before, outage

        t_drain = time.monotonic()
        before, outage = asyncio.run(run())
        drain_s = time.monotonic() - t_drain
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        # what agents may see while the database is away: JSON 503 UNAVAILABLE, a refused
        # or reset connection; never a 500 or a non-JSON answer
        unclear = {k: v for k, v in errors.items() if not _retryable(k)}
        state = db_state(inst.db_url)
        chain_ok, chain_msg = verify_chain(inst)
        alive = server.proc.poll() is None and server.pid == pid
        ok = alive and state_ok(state, o.pg_issues) and chain_ok and not unclear and stats["done"] > before
        result(
            "pg_restart",
            ok,
            seeded=o.pg_issues,
            agents=o.agents,
            done_before_restart=before,
            done_after_restart=stats["done"] - before,
            outage_seconds=round(outage, 1),
            drain_seconds=round(drain_s, 1),
            server_still_running_same_pid=alive,
            agent_errors=errors,
            unclear_errors=unclear,
            verify_chain=chain_ok,
            **({} if chain_ok else {"verify_chain_output": chain_msg}),
            **state,
        )
        if not ok:
            print(server.log()[-3000:], file=sys.stderr)
    except Exception as exc:  # noqa: BLE001
        result("pg_restart", False, error=repr(exc)[:500])
    finally:
        if server:
            server.stop()
        if inst:
            inst.drop(remove_data_dir=True)  # best effort: the whole cluster goes next
        pg.destroy()


def _retryable(stat: str) -> bool:
    """A drain() error key that an agent can act on: retry (503 UNAVAILABLE, a connection
    error) or move on (409 CLAIM_LOST-style refusals of a late done)."""
    parts = stat.split(":")
    if len(parts) == 2:  # next:ConnectError / next:ReadTimeout: the transport failed
        return not parts[1].isdigit()
    status, code = int(parts[1]), parts[2]
    return (status == 503 and code == "UNAVAILABLE") or (400 <= status < 500 and code not in ("None", ""))


# --- a Dash page's live feed (/ws/org/), for the Redis drill ----------------------------

_SESSION_SNIPPET = """
import json
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from apps.accounts.session import SESSION_ORG
from apps.orgs.models import Membership
user = get_user_model().objects.get(email__iexact=%r)
org_id = Membership.objects.filter(user=user).values_list("org_id", flat=True).first()
s = SessionStore()
s[SESSION_KEY] = str(user.pk)
s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
s[HASH_SESSION_KEY] = user.get_session_auth_hash()
s[SESSION_ORG] = str(org_id)
s.create()
print(json.dumps({"session": s.session_key, "org": str(org_id)}))
"""


def session_for_owner(inst: Instance) -> str:
    """A signed-in browser session of the instance's owner (its ``sessionid`` cookie)."""
    out = inst.manage("shell", "-c", _SESSION_SNIPPET % inst.email)
    return json.loads(out.strip().splitlines()[-1])["session"]


class LiveWatcher:
    """What an open Dash page does: one websocket to /ws/org/ with the session cookie,
    reconnecting after a close (like static/dash/dash.js, backoff capped at 2 s here).
    Counts the events it receives, with the time each arrived."""

    def __init__(self, base: str, cookie: str):
        from urllib.parse import urlparse

        u = urlparse(base)
        self.base, self.host, self.port, self.cookie = base, u.hostname, u.port, cookie
        self.events: list[float] = []  # arrival times (time.monotonic())
        self.connects = 0
        self.closes: Counter = Counter()
        self.stop = asyncio.Event()

    async def _open(self):
        import base64

        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 5)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET /ws/org/ HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: {self.base}\r\nCookie: sessionid={self.cookie}\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 10)
        while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b""):
            pass
        if b" 101 " not in status:
            writer.close()
            raise ConnectionError(status.decode(errors="replace").strip())
        return reader, writer

    @staticmethod
    async def _frame(reader) -> tuple[int, bytes]:
        head = await reader.readexactly(2)
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            n = int.from_bytes(await reader.readexactly(2), "big")
        elif n == 127:
            n = int.from_bytes(await reader.readexactly(8), "big")
        mask = await reader.readexactly(4) if head[1] & 0x80 else b""
        data = await reader.readexactly(n)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        return opcode, data

    async def run(self) -> None:
        while not self.stop.is_set():
            writer = None
            try:
                reader, writer = await self._open()
                self.connects += 1
                while not self.stop.is_set():
                    try:
                        opcode, data = await asyncio.wait_for(self._frame(reader), 1)
                    except TimeoutError:
                        continue
                    if opcode == 8:  # close
                        self.closes[int.from_bytes(data[:2], "big") if len(data) >= 2 else 1005] += 1
                        break
                    if opcode == 1:
                        msg = json.loads(data)
                        if msg.get("type") == "events":
                            self.events.extend([time.monotonic()] * len(msg.get("events", [])))
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ConnectionError) as exc:
                self.closes[type(exc).__name__] += 1
            finally:
                if writer:
                    writer.close()
            if not self.stop.is_set():
                await asyncio.sleep(0.5)

    def count(self, since: float, until: float | None = None) -> int:
        return sum(1 for t in self.events if t >= since and (until is None or t < until))


def _start_redis(port: int, rdir: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", rdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        if not _free_tcp(port):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server did not start on port {port}")


def drill_redis_stop(o) -> None:
    """Redis (channel layer, cache, Celery broker) stops mid-drain and comes back empty."""
    import httpx2

    port = next(p for p in range(o.redis_port, o.redis_port + 50) if _free_tcp(p))
    rdir = tempfile.mkdtemp(prefix=f"{DB_PREFIX.replace('_', '-')}-redis-")
    redis = _start_redis(port, rdir)
    inst = server = None
    try:
        inst = new_instance("postgres", lease_ttl=5, prefix="BENCH", db_prefix=DB_PREFIX)
        s = seed(inst, projects=["BENCH"], issues=o.redis_issues, keys=o.agents)
        keys = [k["key"] for k in s["keys"]]
        cookie = session_for_owner(inst)
        server = start_daphne(inst, REDIS_URL=f"redis://127.0.0.1:{port}/0")
        stats, seen = Counter(), Counter()
        marks: dict = {}

        async def run():
            nonlocal redis
            watcher = LiveWatcher(server.base, cookie)
            wtask = asyncio.create_task(watcher.run())
            task = asyncio.create_task(drain(server.base, keys, o.agents, o.drain_seconds, stats, seen))
            await until_mid_drain(o, stats, o.redis_issues)
            marks["done_before_stop"] = stats["done"]
            marks["stop"] = time.monotonic()
            redis.terminate()
            await asyncio.to_thread(redis.wait, 10)
            await asyncio.sleep(o.redis_down)
            marks["done_while_down"] = stats["done"] - marks["done_before_stop"]
            redis = await asyncio.to_thread(_start_redis, port, rdir)  # back, empty (no persistence)
            marks["restart"] = time.monotonic()
            await task
            marks["drained"] = time.monotonic()
            # one more change after the drain: an open page must hear about it now that Redis is back
            async with httpx2.AsyncClient(base_url=server.base, timeout=20) as c:
                for _ in range(10):
                    r = await c.post(
                        "/api/v1/issues",
                        json={"title": "live feed probe", "work": False, "noDependency": "drill probe"},
                        headers={"Authorization": f"Bearer {keys[0]}"},
                    )
                    marks["probe_status"] = r.status_code
                    if r.status_code != 201:
                        marks["probe_refusal"] = r.text[:300]
                        break
                    t_probe = time.monotonic()
                    while time.monotonic() - t_probe < 3 and not watcher.count(t_probe):
                        await asyncio.sleep(0.1)
                    if watcher.count(t_probe):
                        marks["probe_heard_after_s"] = round(time.monotonic() - marks["restart"], 1)
                        break
            watcher.stop.set()
            await wtask
            return watcher

        watcher = asyncio.run(run())
        after = stats["done"] - marks["done_before_stop"]
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        unclear = {k: v for k, v in errors.items() if not _retryable(k)}
        state = db_state(inst.db_url)
        chain_ok, chain_msg = verify_chain(inst)
        live = {
            "events_before_stop": watcher.count(0, marks["stop"]),
            "events_while_down": watcher.count(marks["stop"], marks["restart"]),
            "events_after_restart": watcher.count(marks["restart"]),
            "socket_connects": watcher.connects,
            "socket_closes": dict(watcher.closes),
            "probe_status": marks.get("probe_status"),
            "probe_refusal": marks.get("probe_refusal"),
            "first_event_after_restart_s": next(
                (round(t - marks["restart"], 1) for t in sorted(watcher.events) if t >= marks["restart"]), None
            ),
            "probe_heard_after_restart_s": marks.get("probe_heard_after_s"),
        }
        ok = (
            state_ok(state, o.redis_issues)
            and chain_ok
            and marks["done_while_down"] > 0  # the work loop kept working without Redis
            and not unclear
            and live["events_before_stop"] > 0  # live updates flowed ...
            and "probe_heard_after_s" in marks  # ... and resumed once Redis was back
        )
        result(
            "redis_stop",
            ok,
            seeded=o.redis_issues,
            agents=o.agents,
            done_before_stop=marks["done_before_stop"],
            done_while_down=marks["done_while_down"],
            done_after_stop=after,
            redis_down_seconds=o.redis_down,
            drain_seconds=round(marks["drained"] - marks["stop"], 1),
            agent_errors=errors,
            unclear_errors=unclear,
            live=live,
            server_alive=server.proc.poll() is None,
            verify_chain=chain_ok,
            **({} if chain_ok else {"verify_chain_output": chain_msg}),
            **state,
        )
        if not ok:
            print(server.log()[-3000:], file=sys.stderr)
    except Exception as exc:  # noqa: BLE001
        result("redis_stop", False, error=repr(exc)[:500])
    finally:
        if redis.poll() is None:
            redis.kill()
            redis.wait(5)
        if server:
            server.stop()
        if inst:
            inst.drop(remove_data_dir=True)
        shutil.rmtree(rdir, ignore_errors=True)


def drill_no_celery(o) -> None:
    import httpx2

    inst = new_instance("postgres", lease_ttl=5, prefix="BENCH", db_prefix=DB_PREFIX)
    server = None
    try:
        s = seed(inst, projects=["BENCH"], issues=1, keys=2)
        a, b = (k["key"] for k in s["keys"])
        server = start_daphne(inst)  # RETASC_INPROCESS_JOBS=false, no REDIS_URL, no Celery worker anywhere
        with httpx2.Client(base_url=server.base, timeout=30) as c:
            d = c.post("/api/v1/work/next", json={}, headers={"Authorization": f"Bearer {a}"}).json()
            ident, tok = d["issue"]["identifier"], d["claimToken"]
            c.post(
                f"/api/v1/issues/{ident}/checkpoint",
                json={"note": "half way", "claimToken": tok},
                headers={"Authorization": f"Bearer {a}"},
            )
            early = c.post("/api/v1/work/next", json={}, headers={"Authorization": f"Bearer {b}"}).json()
            time.sleep(6.5)  # the 5 s lease lapses; no job runs
            late = c.post("/api/v1/work/next", json={}, headers={"Authorization": f"Bearer {b}"}).json()
            lost = c.patch(
                f"/api/v1/issues/{ident}", json={"status": "done", "claimToken": tok}, headers={"Authorization": f"Bearer {a}"}
            )
        ok = (
            early["issue"] is None
            and late["issue"]
            and late["issue"]["identifier"] == ident
            and late["resumed"]
            and late["checkpoint"] == "half way"
            and late["reclaimCount"] == 1
            and lost.status_code in (403, 409)
        )
        result(
            "no_celery",
            ok,
            held_while_live=early["issue"] is None,
            handed_out_after_expiry=bool(late["issue"]),
            resumed=late.get("resumed"),
            reclaimCount=late.get("reclaimCount"),
            old_holder_late_write=f"{lost.status_code} {lost.json().get('code')}",
        )
    except Exception as exc:  # noqa: BLE001
        result("no_celery", False, error=repr(exc)[:500])
    finally:
        if server:
            server.stop()
        inst.drop(remove_data_dir=True)


class CeleryProcs:
    """A private Celery beat and worker (``celery -A retasc``) against the private Redis,
    each in its own process group so ``kill -9`` takes the whole worker (pool included)."""

    def __init__(self, inst: Instance, env: dict, workdir: str):
        self.env, self.workdir = inst.env(**env), workdir
        self.beat: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.logs: list[str] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = os.path.join(self.workdir, f"{name}-{len(self.logs)}.log")
        self.logs.append(log)
        celery = str(Path(PY).with_name("celery"))
        with open(log, "ab") as f:
            return subprocess.Popen(
                [celery, "-A", "retasc", *args, "--loglevel", "WARNING"],
                cwd=ROOT,
                env=self.env,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_beat(self) -> None:
        self.beat = self._spawn("beat", "beat", "--schedule", os.path.join(self.workdir, "beat-schedule"))

    def start_worker(self) -> None:
        self.worker = self._spawn(
            "worker", "worker", "--concurrency", "1", "--hostname", f"drill{len(self.logs)}@127.0.0.1", "--without-gossip"
        )

    def kill_worker(self) -> None:
        if self.worker and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(10)

    def stop(self) -> None:
        for proc in (self.worker, self.beat):
            if proc and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)

    def tail(self) -> str:
        return "\n".join(f"== {log}\n{_lines_tail(log)}" for log in self.logs)


def _lines_tail(path: str, n: int = 20) -> str:
    return "\n".join(_lines(path)[-n:])


def drill_celery_worker(o) -> None:
    """A real Celery worker (and beat) against the private Redis, killed -9 mid-drain.

    A second project (IDLE) that no draining agent serves holds leases abandoned on
    purpose, so what the periodic job does is visible apart from dispatch:

    1. worker up: an abandoned lease gets its ``reclaimed`` receipt from the job (runtime
       "system") within TTL + a few seconds;
    2. ``kill -9`` of the worker mid-drain; IDLE leases abandoned now expire with no
       receipt (no job runs), yet ``next_issue`` hands one of them out (resumed from its
       checkpoint): dispatch treats an expired lease as free; the drain goes on;
    3. the worker returns: the remaining expired IDLE leases get their receipts (catch-up).
    """
    import httpx2
    import psycopg

    port = next(p for p in range(o.redis_port, o.redis_port + 50) if _free_tcp(p))
    workdir = tempfile.mkdtemp(prefix=f"{DB_PREFIX.replace('_', '-')}-celery-")
    redis = _start_redis(port, workdir)
    inst = server = celery = None
    idle_n = 7
    try:
        inst = new_instance("postgres", lease_ttl=5, prefix="BENCH", db_prefix=DB_PREFIX)
        s = seed(inst, projects=["BENCH"], issues=o.celery_issues, keys=o.agents)
        keys = [k["key"] for k in s["keys"]]
        idle = seed(inst, projects=["IDLE"], issues=idle_n, keys=2, key_projects=["IDLE"])
        abandoner, taker = (k["key"] for k in idle["keys"])
        env = {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "RETASC_RECLAIM_INTERVAL_SECONDS": "1"}
        server = start_daphne(inst, **env)  # RETASC_INPROCESS_JOBS=false: only Celery runs the job
        celery = CeleryProcs(inst, env, workdir)
        celery.start_beat()
        celery.start_worker()
        db = psycopg.connect(inst.db_url.replace("postgres://", "postgresql://"), autocommit=True)

        def idle_rows() -> list[tuple]:
            """(number, status, reclaim_count, lease expired?, system reclaim receipts) per IDLE issue."""
            return db.execute(
                "SELECT i.number, i.status, i.reclaim_count, i.lease_expires_at <= now(),"
                " (SELECT count(*) FROM issues_activity a WHERE a.issue_id = i.id AND a.verb = 'reclaimed'"
                "  AND a.runtime = 'system')"
                " FROM issues_issue i JOIN orgs_project p ON p.id = i.project_id WHERE p.prefix = 'IDLE' ORDER BY 1"
            ).fetchall()

        def system_receipts() -> int:
            return sum(r[4] for r in idle_rows())

        async def abandon(note: str, limit: int) -> dict[str, bool]:
            """Claim up to ``limit`` IDLE issues in one batch, checkpoint them all at once
            (under load a checkpoint sent after the 5 s lease lapsed is refused), walk away.
            Returns identifier -> whether its checkpoint was saved."""
            auth = {"Authorization": f"Bearer {abandoner}"}
            async with httpx2.AsyncClient(base_url=server.base, timeout=30, headers=auth) as c:
                r = await c.post("/api/v1/work/batch", json={"n": limit, "claim": True})
                claims = r.json().get("claims", [])

                async def checkpoint(claim) -> bool:
                    ident = claim["issue"]["identifier"]
                    r = await c.post(f"/api/v1/issues/{ident}/checkpoint", json={"note": note, "claimToken": claim["claimToken"]})
                    return r.status_code == 200

                saved = await asyncio.gather(*(checkpoint(cl) for cl in claims))
            return {cl["issue"]["identifier"]: ok for cl, ok in zip(claims, saved, strict=True)}

        def wait_for(pred, seconds: float) -> float | None:
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                if pred():
                    return round(time.monotonic() - t0, 1)
                time.sleep(0.25)
            return None

        marks: dict = {}
        # 1. the worker (and beat) work: an abandoned lease gets the job's receipt
        marks["abandoned_while_up"] = asyncio.run(abandon("abandoned while the worker was up", 1))
        marks["worker_up_receipt_after_s"] = wait_for(lambda: system_receipts() >= 1, 60)
        stats, seen = Counter(), Counter()

        async def run():
            task = asyncio.create_task(drain(server.base, keys, o.agents, o.drain_seconds, stats, seen))
            await until_mid_drain(o, stats, o.celery_issues)
            # 2. kill -9 the worker (its pool too) mid-drain; beat keeps queueing the job
            await asyncio.to_thread(celery.kill_worker)
            marks["done_at_kill"] = stats["done"]
            receipts_at_kill = await asyncio.to_thread(system_receipts)
            marks["abandoned_while_dead"] = await abandon("abandoned while the worker was dead", idle_n)
            with httpx2.Client(base_url=server.base, timeout=30) as c:
                await asyncio.sleep(5 + 3)  # the 5 s leases lapse; no job runs
                rows = await asyncio.to_thread(idle_rows)
                marks["receipts_before_restart"] = {r[0]: r[4] for r in rows}
                marks["expired_without_receipt"] = sum(1 for r in rows if r[1] == "doing" and r[3])
                marks["system_receipts_while_dead"] = sum(r[4] for r in rows) - receipts_at_kill
                # dispatch alone hands out an expired lease, resumed from its checkpoint
                d = c.post("/api/v1/work/next", json={}, headers={"Authorization": f"Bearer {taker}"}).json()
                marks["dispatch_while_dead"] = {
                    "issue": (d.get("issue") or {}).get("identifier"),
                    "resumed": d.get("resumed"),
                    "checkpoint": d.get("checkpoint"),
                    "reclaimCount": d.get("reclaimCount"),
                }
                if d.get("issue"):
                    r = c.patch(
                        f"/api/v1/issues/{d['issue']['identifier']}",
                        json={"status": "done", "claimToken": d["claimToken"]},
                        headers={"Authorization": f"Bearer {taker}"},
                    )
                    marks["taker_done"] = r.status_code
            marks["done_while_dead"] = stats["done"] - marks["done_at_kill"]
            # 3. the worker returns: the receipts catch up
            await asyncio.to_thread(celery.start_worker)
            marks["catch_up_after_s"] = await asyncio.to_thread(
                wait_for, lambda: all(r[1] in ("todo", "done") for r in idle_rows()), 90
            )
            await task

        t0 = time.monotonic()
        asyncio.run(run())
        drain_s = time.monotonic() - t0
        rows = idle_rows()
        db.close()
        celery_alive = celery.worker.poll() is None and celery.beat.poll() is None
        celery.stop()
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        state = db_state(inst.db_url, prefix="BENCH")
        whole = db_state(inst.db_url)
        chain_ok, chain_msg = verify_chain(inst)
        dispatched = marks["dispatch_while_dead"]
        before = marks["receipts_before_restart"]
        caught_up = sum(1 for r in rows if r[1] == "todo" and r[4] == before[r[0]] + 1)
        expected_note = (
            "abandoned while the worker was dead"
            if marks["abandoned_while_dead"].get(dispatched["issue"])
            else "abandoned while the worker was up"
            if marks["abandoned_while_up"].get(dispatched["issue"])
            else None
        )
        idle_ok = (
            marks["worker_up_receipt_after_s"] is not None
            and len(marks["abandoned_while_dead"]) == idle_n
            and marks["expired_without_receipt"] == idle_n
            and marks["system_receipts_while_dead"] == 0
            and dispatched["issue"] in marks["abandoned_while_dead"]
            # resumed from its last saved checkpoint (a checkpoint that came after the lease
            # lapsed was refused)
            and dispatched["checkpoint"] == expected_note
            and dispatched["resumed"] is (expected_note is not None)
            and (dispatched["reclaimCount"] or 0) >= 1
            and marks.get("taker_done") == 200
            and marks["catch_up_after_s"] is not None
            # each issue abandoned while the worker was dead and not handed out again: exactly
            # one receipt from the job once the worker was back
            and caught_up == idle_n - 1
        )
        ok = (
            idle_ok
            and state_ok(state, o.celery_issues)
            and whole["held_twice_ever"] == 0
            and whole["reclaim_count_vs_receipts_mismatch"] == 0
            and marks["done_while_dead"] > 0
            and celery_alive
            and chain_ok
        )
        result(
            "celery_worker",
            ok,
            seeded=o.celery_issues,
            agents=o.agents,
            worker_up_receipt_after_s=marks["worker_up_receipt_after_s"],
            done_at_kill=marks["done_at_kill"],
            done_while_worker_dead=marks["done_while_dead"],
            idle_abandoned_while_dead=len(marks["abandoned_while_dead"]),
            idle_checkpointed_while_dead=sum(marks["abandoned_while_dead"].values()),
            idle_expired_without_receipt=marks["expired_without_receipt"],
            system_receipts_while_dead=marks["system_receipts_while_dead"],
            dispatch_while_dead=dispatched,
            receipts_caught_up_after_restart_s=marks["catch_up_after_s"],
            receipts_caught_up=caught_up,
            idle_issues=[{"n": r[0], "status": r[1], "reclaimCount": r[2], "systemReceipts": r[4]} for r in rows],
            drain_seconds=round(drain_s, 1),
            agent_errors=errors,
            celery_alive_at_end=celery_alive,
            verify_chain=chain_ok,
            **({} if chain_ok else {"verify_chain_output": chain_msg}),
            **state,
        )
        if not ok:
            print(celery.tail()[-4000:], file=sys.stderr)
    except Exception as exc:  # noqa: BLE001
        result("celery_worker", False, error=repr(exc)[:500])
        if celery:
            print(celery.tail()[-4000:], file=sys.stderr)
    finally:
        if celery:
            celery.stop()
        if redis.poll() is None:
            redis.kill()
            redis.wait(5)
        if server:
            server.stop()
        if inst:
            inst.drop(remove_data_dir=True)
        shutil.rmtree(workdir, ignore_errors=True)


def drill_sigterm(o) -> None:
    """SIGTERM to Daphne mid-drain; then a new Daphne finishes the drain on the same database."""
    inst = new_instance("postgres", lease_ttl=5, prefix="BENCH", db_prefix=DB_PREFIX)
    server = second = None
    try:
        s = seed(inst, projects=["BENCH"], issues=o.sigterm_issues, keys=o.agents)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        stats, seen = Counter(), Counter()
        marks: dict = {}

        async def run():
            stop = asyncio.Event()
            task = asyncio.create_task(drain(server.base, keys, o.agents, o.drain_seconds, stats, seen, stop=stop))
            await until_mid_drain(o, stats, o.sigterm_issues)
            marks["done_before_term"] = stats["done"]
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            try:
                marks["exit_code"] = await asyncio.to_thread(server.proc.wait, 30)
                marks["exit_seconds"] = round(time.monotonic() - t0, 2)
            except subprocess.TimeoutExpired:
                marks["exit_code"] = marks["exit_seconds"] = None
            await asyncio.sleep(1)  # the agents see the server gone
            stop.set()
            await task

        asyncio.run(run())
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        unclear = {k: v for k, v in errors.items() if not _retryable(k)}
        tracebacks = server.log().count("Traceback")
        import psycopg

        with psycopg.connect(inst.db_url.replace("postgres://", "postgresql://")) as conn:
            # a claim whose response never arrived stays held until its lease lapses (then is
            # reclaimed): that is the clean failure. Torn would be an issue marked held whose
            # claim row is ended (or missing), or a done issue still marked held.
            torn = conn.execute(
                "SELECT count(*) FROM issues_issue i LEFT JOIN leases_claim c ON c.id = i.lease_claim_id"
                " WHERE (i.lease_claim_id IS NOT NULL AND (c.id IS NULL OR c.ended_at IS NOT NULL))"
                "    OR (i.status = 'done' AND i.lease_claim_id IS NOT NULL)"
            ).fetchone()[0]
            doing = conn.execute("SELECT count(*) FROM issues_issue WHERE status='doing'").fetchone()[0]
        # a fresh server finishes the drain: nothing was lost, nothing is finished twice
        second = start_daphne(inst)
        stats2, seen2 = Counter(), Counter()
        t1 = time.monotonic()
        asyncio.run(drain(second.base, keys, o.agents, o.drain_seconds, stats2, seen2))
        finish_s = time.monotonic() - t1
        second.stop()
        state = db_state(inst.db_url)
        chain_ok, chain_msg = verify_chain(inst)
        ok = (
            marks["exit_code"] is not None
            and marks["exit_seconds"] < 30
            and torn == 0
            and not unclear
            and tracebacks == 0
            and state_ok(state, o.sigterm_issues)
            and chain_ok
        )
        result(
            "sigterm",
            ok,
            seeded=o.sigterm_issues,
            agents=o.agents,
            exit_code=marks["exit_code"],
            exit_seconds=marks["exit_seconds"],
            done_before_term=marks["done_before_term"],
            done_by_first_server=stats["done"],
            client_errors=errors,
            unclear_errors=unclear,
            server_tracebacks=tracebacks,
            torn_rows=torn,
            held_when_stopped=doing,
            second_server_done=stats2["done"],
            second_server_seconds=round(finish_s, 1),
            verify_chain=chain_ok,
            **({} if chain_ok else {"verify_chain_output": chain_msg}),
            **state,
        )
        if tracebacks:
            print(server.log()[-3000:], file=sys.stderr)
    except Exception as exc:  # noqa: BLE001
        result("sigterm", False, error=repr(exc)[:500])
    finally:
        for srv in (server, second):
            if srv and srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait(5)
        inst.drop(remove_data_dir=True)


# --- notify: delivery survives a killed worker, a stopped Redis and a provider that is down ---


def notify_setup_main(argv) -> None:
    """(In the instance's environment.) A member bound on a Telegram channel; prints JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--token", required=True)
    o = p.parse_args(argv)
    import django

    django.setup()
    from apps.notifications import services as notify
    from apps.orgs.models import Membership, Org
    from apps.orgs.services import actor_for_human, agent_key_mint, member_add, user_get_or_create

    org = Org.objects.get(slug="bench")
    owner = Membership.objects.select_related("user").get(org=org, role="owner").user
    member, _ = user_get_or_create(email="member@drill.test", password="drill-member-pw")
    member_add(org=org, user=member)
    owner_actor = actor_for_human(user=owner, org=org)
    channel = notify.channel_create(actor=owner_actor, kind="telegram", bot_token=o.token)
    code, _ = notify.binding_code_create(actor=actor_for_human(user=member, org=org), channel_id=channel.pk)
    notify.binding_redeem(channel=channel, code=code, target="4242", label="drill")
    _, member_key = agent_key_mint(org=org, user=member, project=org.projects.get(), runtime="drill", label="author")
    _, owner_key = agent_key_mint(org=org, user=owner, project=org.projects.get(), runtime="drill", label="finisher")
    print(json.dumps({"memberKey": member_key, "ownerKey": owner_key}))


def notify_act_main(argv) -> None:
    """(In the instance's environment.) The member's agent files ``--count`` issues; the
    owner's agent claims and finishes each: one message to the member per issue."""
    p = argparse.ArgumentParser()
    p.add_argument("--member-key", required=True)
    p.add_argument("--owner-key", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--tag", default="n")
    o = p.parse_args(argv)
    import django

    django.setup()
    from apps.issues.services import issue_create, issue_update
    from apps.leases.services import claim_issue
    from apps.orgs.services import agent_key_authenticate

    author, finisher = agent_key_authenticate(o.member_key), agent_key_authenticate(o.owner_key)
    for i in range(o.count):
        issue = issue_create(actor=author, title=f"drill {o.tag}{i}", work=True, no_dependency="drill", source="drill")
        claim = claim_issue(actor=finisher, identifier=issue.identifier)
        issue_update(actor=finisher, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])
    print(json.dumps({"acted": o.count}))


def drill_notify(o) -> None:
    import psycopg

    from tests.fakes.telegram import FakeTelegram

    class SlowTelegram(FakeTelegram):
        """Each send takes a while; the fourth is received (and kept) but not answered until
        the worker has been killed, so the kill lands mid-delivery for sure."""

        holding = threading.Event()

        def _send(self, request):
            answer = super()._send(request)
            if len(self.delivered) == 4 and not self.holding.is_set():
                self.holding.set()
                time.sleep(20)
            time.sleep(0.25)
            return answer

    fake = SlowTelegram().start()
    port = next(p for p in range(o.redis_port, o.redis_port + 50) if _free_tcp(p))
    workdir = tempfile.mkdtemp(prefix=f"{DB_PREFIX.replace('_', '-')}-notify-")
    redis = _start_redis(port, workdir)
    inst = celery = None
    n = o.notify_issues
    try:
        inst = new_instance("postgres", prefix="BENCH", db_prefix=DB_PREFIX)
        env = {
            "REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "RETASC_TELEGRAM_API_URL": fake.url,
            "RETASC_NOTIFY_INTERVAL_SECONDS": "1",
            "RETASC_NOTIFY_LEASE_SECONDS": "3",
            "RETASC_INPROCESS_JOBS": "false",
        }

        def run(*args, extra_env=None) -> dict:
            proc = subprocess.run(
                [PY, "-m", "bench.drills", *args],
                cwd=ROOT,
                env=inst.env(**{**env, **(extra_env or {})}),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode:
                raise RuntimeError(proc.stderr[-2000:])
            return json.loads(proc.stdout.strip().splitlines()[-1])

        keys = run("notify_setup", "--token", fake.token)
        act = ["--member-key", keys["memberKey"], "--owner-key", keys["ownerKey"]]
        celery = CeleryProcs(inst, env, workdir)
        celery.start_beat()
        celery.start_worker()
        db = psycopg.connect(inst.db_url.replace("postgres://", "postgresql://"), autocommit=True)

        def statuses() -> Counter:
            return Counter(dict(db.execute("SELECT status, count(*) FROM notifications_delivery GROUP BY 1").fetchall()))

        run("notify_act", *act, "--count", str(n // 2), "--tag", "a")
        fake.holding.wait(120)
        celery.kill_worker()  # mid-delivery: the provider has the 4th message, the worker no answer
        killed_after = len(fake.delivered)
        redis.terminate()
        redis.wait(10)
        # Redis down: the actions still commit; the wake-up is lost, the rows are not.
        acted_without_redis = run("notify_act", *act, "--count", str(n - n // 2), "--tag", "b")
        fake.stop()  # the provider is down too when the worker returns
        redis = _start_redis(port, workdir)
        celery.start_worker()
        deadline = time.monotonic() + 120
        failed_while_down = 0
        while not failed_while_down and time.monotonic() < deadline:  # the worker is back and finds no provider
            time.sleep(0.5)
            failed_while_down = db.execute("SELECT count(*) FROM notifications_delivery WHERE last_error <> ''").fetchone()[0]
        fake.start()
        deadline = time.monotonic() + o.drain_seconds
        while time.monotonic() < deadline:
            if statuses().get("sent", 0) == n and len(fake.delivered) == n:
                break
            time.sleep(0.5)
        state = statuses()
        outbox = db.execute("SELECT count(*) FROM notifications_outbox").fetchone()[0]
        sends = len(fake.seen("POST", r"/bot[^/]+/sendMessage"))
        keys_seen = set(fake.delivered)
        keys_db = {r[0] for r in db.execute("SELECT idempotency_key FROM notifications_delivery WHERE status = 'sent'")}
        ok = (
            outbox == n
            and state.get("sent", 0) == n
            and sum(state.values()) == n
            and len(fake.delivered) == n
            and keys_seen == keys_db
            and sends > n  # the killed worker's message went twice (same key), and failures were retried
            and failed_while_down > 0
            and acted_without_redis["acted"] == n - n // 2
        )
        result(
            "notify",
            ok,
            messages=n,
            outbox_rows=outbox,
            deliveries=dict(state),
            provider_unique=len(fake.delivered),
            provider_requests=sends,
            delivered_before_kill=killed_after,
            redelivered_keys=sorted(
                k
                for k, c in Counter(r.header("idempotency-key") for r in fake.seen("POST", r"/bot[^/]+/sendMessage")).items()
                if c > 1
            )[:5],
            failed_while_provider_down=failed_while_down,
        )
    except Exception as exc:  # noqa: BLE001
        result("notify", False, error=repr(exc)[:500], tail=celery.tail()[-1500:] if celery else "")
    finally:
        if celery:
            celery.stop()
        with contextlib.suppress(Exception):
            redis.terminate()
            redis.wait(10)
        fake.stop()
        if inst:
            inst.drop(remove_data_dir=True)
        shutil.rmtree(workdir, ignore_errors=True)


DRILLS = {
    "kill9": drill_kill9,
    "pg_restart": drill_pg_restart,
    "redis_stop": drill_redis_stop,
    "no_celery": drill_no_celery,
    "celery_worker": drill_celery_worker,
    "sigterm": drill_sigterm,
    "notify": drill_notify,
}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        agent_main(sys.argv[2:])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] in ("notify_setup", "notify_act"):
        (notify_setup_main if sys.argv[1] == "notify_setup" else notify_act_main)(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(DRILLS))
    p.add_argument("--agents", type=int, default=32, help="agents per drill (no_celery uses 2)")
    p.add_argument("--kill-issues", type=int, default=2000)
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--kill-every", type=float, default=1.5)
    p.add_argument("--kill-seconds", type=float, default=600)
    p.add_argument("--pg-issues", type=int, default=2000)
    p.add_argument("--pg-port", type=int, default=5440)
    p.add_argument("--pg-down", type=float, default=3, help="seconds the private cluster stays stopped")
    p.add_argument("--redis-issues", type=int, default=2000)
    p.add_argument("--redis-port", type=int, default=6390)
    p.add_argument("--redis-down", type=float, default=8, help="seconds the private Redis stays stopped")
    p.add_argument("--celery-issues", type=int, default=2000)
    p.add_argument("--sigterm-issues", type=int, default=2000)
    p.add_argument("--notify-issues", type=int, default=40)
    p.add_argument("--fault-after", type=float, default=3, help="fault no earlier than this (s)")
    p.add_argument("--fault-frac", type=float, default=0.3, help="fault once this fraction of the issues is done")
    p.add_argument("--drain-seconds", type=float, default=600)
    p.add_argument("--json-out", default="")
    o = p.parse_args()
    print_header("Retasc fault drills")
    for name in o.only.split(","):
        t0 = time.monotonic()
        print(f"-- {name}", flush=True)
        try:
            DRILLS[name](o)
        except Exception as exc:  # noqa: BLE001
            result(name, False, error=repr(exc)[:500])
        print(f"   ({time.monotonic() - t0:.0f} s)", flush=True)
    if o.json_out:
        Path(o.json_out).write_text(json.dumps(RESULTS, indent=1, default=str))
    failed = [r["drill"] for r in RESULTS if not r["ok"]]
    print("drills: " + ("all passed" if not failed else f"FAILED: {', '.join(failed)}"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
