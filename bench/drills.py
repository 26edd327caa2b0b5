"""Fault drills. Exit status 1 when anything is lost, held twice or finished twice.

    .venv/bin/python -m bench.drills                 # all drills
    .venv/bin/python -m bench.drills --only kill9,pg_restart

* ``kill9``: 32 agent *processes* drain 2,000 issues (lease TTL 5 s); agents are
  ``kill -9``-ed mid-claim (after their checkpoint, before done) and replaced. Every
  issue must end done exactly once; every issue whose holder was killed after its
  checkpoint must be resumed by the next holder with that checkpoint.
* ``pg_restart``: a private PostgreSQL cluster (``pg_createcluster 15 <name> -p <port>``,
  dropped afterwards) is restarted mid-drain. The server must recover without a
  restart, agents see retryable errors, nothing is lost or held twice, verify_chain passes.
* ``redis_stop``: a private redis-server (port 6390 by default) is stopped mid-drain; the
  server runs with REDIS_URL pointing at it. The work loop must keep working.
* ``no_celery``: no Celery worker and no in-process jobs: an abandoned lease expires and
  the next ``next_issue`` hands the issue out again (resumed from its checkpoint).
* ``sigterm``: SIGTERM to Daphne under 32 agents: in-flight requests finish or fail
  cleanly, the process exits, the database is consistent.

Everything is bounded in count and time, binds to 127.0.0.1 and cleans up after itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import PY, ROOT, Instance, new_instance, print_header, seed, start_daphne

RESULTS: list[dict] = []


def result(name: str, ok: bool, **details) -> dict:
    row = {"drill": name, "ok": bool(ok), **details}
    RESULTS.append(row)
    print(json.dumps(row, default=str), flush=True)
    return row


def db_state(db_url: str) -> dict:
    import psycopg

    with psycopg.connect(db_url.replace("postgres://", "postgresql://"), connect_timeout=10) as conn:
        q = lambda sql, *a: conn.execute(sql, a).fetchone()[0]  # noqa: E731
        return {
            "issues": q("SELECT count(*) FROM issues_issue WHERE source='bench'"),
            "done": q("SELECT count(*) FROM issues_issue WHERE source='bench' AND status='done'"),
            "not_done": q("SELECT count(*) FROM issues_issue WHERE source='bench' AND status<>'done'"),
            "finished_twice": q(
                "SELECT count(*) FROM (SELECT issue_id FROM issues_activity WHERE verb='finished'"
                " GROUP BY issue_id HAVING count(*) > 1) x"
            ),
            "finished_receipts": q("SELECT count(*) FROM issues_activity WHERE verb='finished'"),
            "held_twice": q(
                "SELECT count(*) FROM (SELECT issue_id FROM leases_claim WHERE ended_at IS NULL"
                " AND expires_at > now() GROUP BY issue_id HAVING count(*) > 1) x"
            ),
            "reclaimed_issues": q("SELECT count(*) FROM issues_issue WHERE reclaim_count > 0"),
            "reclaimed_receipts": q("SELECT count(*) FROM issues_activity WHERE verb='reclaimed'"),
        }


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
    auth = {"Authorization": f"Bearer {o.key}"}
    empty = 0
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
                if d.get("claimed", 0) == 0 or empty > 200:
                    break  # drained (nothing ready, nothing held)
                time.sleep(0.5)  # issues still held (maybe by a dead agent): wait for the lease
                continue
            empty = 0
            ident, tok = d["issue"]["identifier"], d["claimToken"]
            log.write(
                json.dumps(
                    {
                        "ev": "claimed",
                        "id": ident,
                        "resumed": d["resumed"],
                        "checkpoint": d["checkpoint"],
                        "reclaimCount": d["reclaimCount"],
                    }
                )
                + "\n"
            )
            note = f"step 1 of {ident} by pid {os.getpid()}"
            r = c.post(f"/api/v1/issues/{ident}/checkpoint", json={"note": note, "claimToken": tok})
            log.write(json.dumps({"ev": "checkpoint", "id": ident, "note": note, "status": r.status_code}) + "\n")
            time.sleep(o.work_seconds * random.uniform(0.5, 1.5))
            for _ in range(5):
                try:
                    r = c.patch(f"/api/v1/issues/{ident}", json={"status": "done", "claimToken": tok})
                    break
                except Exception:  # noqa: BLE001
                    time.sleep(0.2)
            log.write(
                json.dumps(
                    {
                        "ev": "done",
                        "id": ident,
                        "status": r.status_code,
                        "code": (r.json() or {}).get("code") if r.status_code != 200 else None,
                    }
                )
                + "\n"
            )


# --- async agents (in-process, for the server-side drills) -----------------------------


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
                    stats[f"next:{r.status_code}"] += 1
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
                    code = (r.json() or {}).get("code") if r.headers.get("content-type", "").startswith("application/") else None
                    stats[f"done:{r.status_code}:{code}"] += 1
                    if r.status_code < 500 and code not in ("UNAVAILABLE",):
                        break  # e.g. CLAIM_LOST after a lease expired: the next holder finishes it
                    await asyncio.sleep(0.3)

    await asyncio.gather(*(agent(keys[i % len(keys)]) for i in range(n)))


# --- drills ---------------------------------------------------------------------------


def drill_kill9(o) -> None:
    inst = new_instance("postgres", lease_ttl=5, prefix="BENCH")
    server = None
    procs: list[subprocess.Popen] = []
    logdir = tempfile.mkdtemp(prefix="retasc-kill9-")
    try:
        s = seed(inst, projects=["BENCH"], issues=o.kill_issues, keys=o.agents)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        deadline = time.time() + o.kill_seconds
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
        kills, killed_logs = 0, []
        time.sleep(3)
        while time.time() < deadline and any(p.poll() is None for p in live.values()):
            time.sleep(o.kill_every)
            if kills >= o.kills:
                continue
            i = random.choice([i for i, p in live.items() if p.poll() is None] or [None])
            if i is None:
                break
            victim = live[i]
            # kill only mid-claim: the last event of its log is a checkpoint (work in progress)
            for _ in range(20):
                try:
                    last = json.loads(Path(victim.log).read_text().splitlines()[-1])
                except (OSError, IndexError, ValueError):
                    last = {}
                if last.get("ev") == "checkpoint":
                    break
                time.sleep(0.02)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            kills += 1
            killed_logs.append(victim.log)
            live[i] = spawn(i)
        for p in procs:
            try:
                p.wait(max(1, deadline - time.time() + 5))
            except subprocess.TimeoutExpired:
                p.kill()
        # what the killed agents held (claimed + checkpointed, never done)
        orphaned = {}
        for log in killed_logs:
            open_ = {}
            for line in _lines(log):
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev["ev"] == "checkpoint" and ev["status"] == 200:
                    open_[ev["id"]] = ev["note"]
                elif ev["ev"] == "done":
                    open_.pop(ev["id"], None)
            orphaned.update(open_)
        resumed_ok, resumed_bad = 0, []
        claims_by_id: dict = {}
        for p in procs:
            for line in _lines(p.log):
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev["ev"] == "claimed":
                    claims_by_id.setdefault(ev["id"], []).append(ev)
        for ident, note in orphaned.items():
            later = [c for c in claims_by_id.get(ident, []) if c["resumed"] and c["checkpoint"] == note]
            if later:
                resumed_ok += 1
            else:
                resumed_bad.append(ident)
        state = db_state(inst.db_url)
        chain_ok, chain_msg = verify_chain(inst)
        ok = (
            state["not_done"] == 0
            and state["finished_twice"] == 0
            and state["finished_receipts"] == state["issues"]
            and not resumed_bad
            and kills > 0
            and chain_ok
            and state["held_twice"] == 0
        )
        result(
            "kill9",
            ok,
            seeded=o.kill_issues,
            agents=o.agents,
            kills=kills,
            orphaned_after_checkpoint=len(orphaned),
            resumed_from_checkpoint=resumed_ok,
            not_resumed=resumed_bad[:10],
            verify_chain=chain_ok,
            **state,
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if server:
            server.stop()
        inst.drop()
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


def drill_pg_restart(o) -> None:
    name = f"rbench{os.getpid()}"
    port = next(p for p in range(o.pg_port, o.pg_port + 50) if _free_tcp(p))
    made = False
    server = None
    try:
        subprocess.run(
            ["pg_createcluster", "15", name, "-p", str(port), "--", "--auth-host=trust", "--auth-local=trust"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        made = True
        # listen on loopback only
        conf = f"/etc/postgresql/15/{name}/postgresql.conf"
        with open(conf, "a") as f:
            f.write("\nlisten_addresses = '127.0.0.1'\nfsync = off\n")
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", name, "start"], check=True, timeout=120)
        inst = new_instance("postgres", lease_ttl=5, pg_port=port, prefix="BENCH")
        s = seed(inst, projects=["BENCH"], issues=o.pg_issues, keys=32)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        pid = server.pid
        stats, seen = Counter(), Counter()

        async def run():
            task = asyncio.create_task(drain(server.base, keys, 32, o.drain_seconds, stats, seen))
            await asyncio.sleep(o.fault_after)
            before = stats["done"]
            t0 = time.monotonic()
            await asyncio.to_thread(
                subprocess.run,
                ["pg_ctlcluster", "--skip-systemctl-redirect", "15", name, "restart", "-m", "fast"],
                check=True,
                timeout=120,
            )
            restart_s = time.monotonic() - t0
            await task
            return before, restart_s

        before, restart_s = asyncio.run(run())
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        state = db_state(inst.db_url)
        chain_ok, chain_msg = verify_chain(inst)
        alive = server.proc.poll() is None and server.pid == pid
        ok = (
            alive
            and state["not_done"] == 0
            and state["finished_twice"] == 0
            and state["held_twice"] == 0
            and chain_ok
            and state["finished_receipts"] == state["issues"]
        )
        result(
            "pg_restart",
            ok,
            seeded=o.pg_issues,
            agents=32,
            done_before_restart=before,
            restart_seconds=round(restart_s, 1),
            server_still_running_same_pid=alive,
            agent_errors=errors,
            verify_chain=chain_ok,
            **state,
        )
    except Exception as exc:  # noqa: BLE001
        result("pg_restart", False, error=repr(exc)[:500])
    finally:
        if server:
            server.stop()
        if made:
            subprocess.run(["pg_dropcluster", "--stop", "15", name], capture_output=True, timeout=120)


def drill_redis_stop(o) -> None:
    port = next(p for p in range(o.redis_port, o.redis_port + 50) if _free_tcp(p))
    rdir = tempfile.mkdtemp(prefix="retasc-redis-")
    redis = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", rdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    inst = server = None
    try:
        time.sleep(0.5)
        inst = new_instance("postgres", lease_ttl=5, prefix="BENCH")
        s = seed(inst, projects=["BENCH"], issues=o.redis_issues, keys=16)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst, REDIS_URL=f"redis://127.0.0.1:{port}/0")
        stats, seen = Counter(), Counter()

        async def run():
            task = asyncio.create_task(drain(server.base, keys, 16, o.drain_seconds, stats, seen))
            await asyncio.sleep(o.fault_after)
            before = stats["done"]
            redis.terminate()
            await asyncio.to_thread(redis.wait, 10)
            await task
            return before

        before = asyncio.run(run())
        after = stats["done"] - before
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        state = db_state(inst.db_url)
        ok = state["not_done"] == 0 and state["finished_twice"] == 0 and state["held_twice"] == 0 and after > 0
        result(
            "redis_stop",
            ok,
            seeded=o.redis_issues,
            agents=16,
            done_before_stop=before,
            done_after_stop=after,
            agent_errors=errors,
            server_alive=server.proc.poll() is None,
            **state,
        )
    except Exception as exc:  # noqa: BLE001
        result("redis_stop", False, error=repr(exc)[:500])
    finally:
        if redis.poll() is None:
            redis.kill()
        if server:
            server.stop()
        if inst:
            inst.drop()
        shutil.rmtree(rdir, ignore_errors=True)


def drill_no_celery(o) -> None:
    import httpx2

    inst = new_instance("postgres", lease_ttl=5, prefix="BENCH")
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
        inst.drop()


def drill_sigterm(o) -> None:
    inst = new_instance("postgres", prefix="BENCH")
    server = None
    try:
        s = seed(inst, projects=["BENCH"], issues=o.sigterm_issues, keys=32)
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        stats, seen = Counter(), Counter()

        async def run():
            task = asyncio.create_task(drain(server.base, keys, 32, 25, stats, seen))
            await asyncio.sleep(o.fault_after)
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(server.proc.wait, 30)
            exit_s = time.monotonic() - t0
            await task
            return code, exit_s

        try:
            code, exit_s = asyncio.run(run())
        except subprocess.TimeoutExpired:
            code, exit_s = None, None
        state = db_state(inst.db_url)
        import psycopg

        with psycopg.connect(inst.db_url.replace("postgres://", "postgresql://")) as conn:
            # a claim whose response never arrived stays held until its lease lapses (then is reclaimed): that is the
            # clean failure. Inconsistent would be an issue marked held whose claim row is ended, or the reverse.
            torn = conn.execute(
                "SELECT count(*) FROM issues_issue i LEFT JOIN leases_claim c ON c.id = i.lease_claim_id"
                " WHERE (i.lease_claim_id IS NOT NULL AND (c.id IS NULL OR c.ended_at IS NOT NULL))"
                "    OR (i.status = 'done' AND i.lease_claim_id IS NOT NULL)"
            ).fetchone()[0]
            doing = conn.execute("SELECT count(*) FROM issues_issue WHERE status='doing'").fetchone()[0]
        chain_ok, _ = verify_chain(inst)
        errors = {k: v for k, v in stats.items() if k not in ("claims", "done")}
        ok = code is not None and exit_s is not None and exit_s < 30 and torn == 0 and state["finished_twice"] == 0 and chain_ok
        result(
            "sigterm",
            ok,
            exit_code=code,
            exit_seconds=None if exit_s is None else round(exit_s, 2),
            done_before_exit=stats["done"],
            client_errors=errors,
            torn_rows=torn,
            held_when_killed=doing,
            verify_chain=chain_ok,
            finished_twice=state["finished_twice"],
            done=state["done"],
        )
    except Exception as exc:  # noqa: BLE001
        result("sigterm", False, error=repr(exc)[:500])
    finally:
        if server and server.proc.poll() is None:
            server.proc.kill()
        inst.drop()


DRILLS = {
    "kill9": drill_kill9,
    "pg_restart": drill_pg_restart,
    "redis_stop": drill_redis_stop,
    "no_celery": drill_no_celery,
    "sigterm": drill_sigterm,
}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        agent_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(DRILLS))
    p.add_argument("--agents", type=int, default=32)
    p.add_argument("--kill-issues", type=int, default=2000)
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--kill-every", type=float, default=1.5)
    p.add_argument("--kill-seconds", type=float, default=240)
    p.add_argument("--pg-issues", type=int, default=1000)
    p.add_argument("--pg-port", type=int, default=5440)
    p.add_argument("--redis-issues", type=int, default=600)
    p.add_argument("--redis-port", type=int, default=6390)
    p.add_argument("--sigterm-issues", type=int, default=2000)
    p.add_argument("--fault-after", type=float, default=3)
    p.add_argument("--drain-seconds", type=float, default=150)
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
