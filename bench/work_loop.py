"""Work-loop throughput: N concurrent agents pull and finish issues over HTTP and MCP.

Each agent loops: ``next_issue`` (timed) -> ``save_issue status=done`` with its claim
token (so a "claim" below is a *claim + finish*, two requests). One Daphne process,
PostgreSQL, a fresh database. Cells are bounded by a claim budget and a time cap.

In the same run, the raw-SQL limit: the same pull written by hand with psycopg (advisory
lock on the project, top row of the dispatch index with the open-blocker check, mark it
held, insert a claim row; then a second transaction that finishes it), at the same
concurrency. Our claims/s are reported as a ratio of it.

    .venv/bin/python -m bench.work_loop            # full (20,000 ready issues)
    .venv/bin/python -m bench.work_loop --quick    # small sizes, a minute or two
    .venv/bin/python -m bench.work_loop --no-single --processes 1,2,3   # nginx + N Daphne

Beside the psycopg limit, a pgbench one (bench.pg_claim: the same claim + finish from
pgbench's C client); the 32-agent cells are quoted as a share of a pgbench cell run just
before them. ``--processes`` runs the single-project cells through nginx in front of N
web processes (bench.processes, deploy/scaled.py).

Double claims are counted twice: agent-reported (an identifier handed out twice) and in
the database (issues with more than one claim row). Both must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
import zlib
from collections import Counter
from hashlib import sha256

from bench import pg_claim
from bench.common import (
    ROOT,
    ms,
    new_instance,
    percentile,
    print_header,
    seed,
    start_daphne,
)

TARGETS = {"http_ratio_32": 0.25, "mcp_ratio_32": 0.15, "p99_ms_32": 250, "heartbeat_x_claims": 2.0}


class Stats:
    def __init__(self, budget: int, deadline: float):
        self.budget, self.deadline = budget, deadline
        self.claims = 0
        self.lat: list[float] = []
        self.seen: Counter = Counter()
        self.errors: Counter = Counter()
        self.empty = 0

    def take(self) -> bool:
        if self.claims >= self.budget or time.monotonic() > self.deadline:
            return False
        self.claims += 1
        return True


# --- HTTP agents ----------------------------------------------------------------------


async def http_agent(client, base: str, key: str, st: Stats, finish: bool = True):
    auth = {"Authorization": f"Bearer {key}"}
    while st.take():
        t0 = time.perf_counter()
        try:
            r = await client.post(f"{base}/api/v1/work/next", json={}, headers=auth)
        except Exception as exc:  # noqa: BLE001
            st.errors[type(exc).__name__] += 1
            st.claims -= 1
            await asyncio.sleep(0.05)
            continue
        st.lat.append(time.perf_counter() - t0)
        if r.status_code != 200:
            st.errors[f"next:{r.status_code}"] += 1
            st.claims -= 1
            await asyncio.sleep(0.05)
            continue
        data = r.json()
        if data.get("issue") is None:
            st.claims -= 1
            st.empty += 1
            return
        ident = data["issue"]["identifier"]
        st.seen[ident] += 1
        if finish:
            r = await client.patch(
                f"{base}/api/v1/issues/{ident}", json={"status": "done", "claimToken": data["claimToken"]}, headers=auth
            )
            if r.status_code != 200:
                st.errors[f"done:{r.status_code}:{r.text[:80]}"] += 1


async def run_http(base: str, keys: list[str], n: int, budget: int, seconds: float, on_start=None) -> Stats:
    import httpx2

    st = Stats(budget, time.monotonic() + seconds)
    limits = httpx2.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), limits=limits) as client:
        if on_start:
            on_start()
        t0 = time.monotonic()
        await asyncio.gather(*(http_agent(client, base, keys[i % len(keys)], st) for i in range(n)))
        st.elapsed = time.monotonic() - t0
    return st


# --- MCP agents -----------------------------------------------------------------------


def _payload(result) -> dict:
    return json.loads(result.content[0].text)


async def mcp_agent(url: str, key: str, st: Stats, ready: asyncio.Event, started: list):
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(60, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            started.append(1)
            await ready.wait()
            while st.take():
                t0 = time.perf_counter()
                try:
                    res = await client.call_tool("next_issue", {})
                except Exception as exc:  # noqa: BLE001
                    st.errors[type(exc).__name__] += 1
                    st.claims -= 1
                    await asyncio.sleep(0.05)
                    continue
                st.lat.append(time.perf_counter() - t0)
                data = _payload(res)
                if res.is_error:
                    st.errors[f"next:{data.get('code')}"] += 1
                    st.claims -= 1
                    await asyncio.sleep(0.05)
                    continue
                if data.get("issue") is None:
                    st.claims -= 1
                    st.empty += 1
                    return
                ident = data["issue"]["identifier"]
                st.seen[ident] += 1
                res = await client.call_tool(
                    "save_issue", {"identifier": ident, "status": "done", "claimToken": data["claimToken"]}
                )
                if res.is_error:
                    st.errors[f"done:{_payload(res).get('code')}"] += 1


async def run_mcp(base: str, keys: list[str], n: int, budget: int, seconds: float, on_start=None) -> Stats:
    st = Stats(budget, float("inf"))
    ready, started = asyncio.Event(), []
    tasks = [asyncio.create_task(mcp_agent(f"{base}/mcp", keys[i % len(keys)], st, ready, started)) for i in range(n)]
    t_wait = time.monotonic() + 120
    while len(started) < n and time.monotonic() < t_wait and not any(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    st.deadline = time.monotonic() + seconds  # the clock starts once every session is open
    if on_start:
        on_start()
    t0 = time.monotonic()
    ready.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    st.elapsed = time.monotonic() - t0
    for r in results:
        if isinstance(r, BaseException):
            st.errors[f"agent:{type(r).__name__}"] += 1
    return st


# --- heartbeats -----------------------------------------------------------------------


async def run_heartbeats(base: str, keys: list[str], n: int, seconds: float) -> dict:
    import httpx2

    limits = httpx2.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    count, errors, lat = 0, Counter(), []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), limits=limits) as client:
        held = []

        async def grab(key):
            r = await client.post(f"{base}/api/v1/work/next", json={}, headers={"Authorization": f"Bearer {key}"})
            d = r.json()
            if d.get("issue"):
                held.append((key, d["issue"]["identifier"], d["claimToken"]))

        await asyncio.gather(*(grab(keys[i % len(keys)]) for i in range(n)))
        deadline = time.monotonic() + seconds

        async def beat(key, ident, tok):
            nonlocal count
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                r = await client.post(
                    f"{base}/api/v1/issues/{ident}/heartbeat",
                    json={"claimToken": tok},
                    headers={"Authorization": f"Bearer {key}"},
                )
                lat.append(time.perf_counter() - t0)
                if r.status_code == 200:
                    count += 1
                else:
                    errors[r.status_code] += 1

        t0 = time.monotonic()
        await asyncio.gather(*(beat(*h) for h in held))
        elapsed = time.monotonic() - t0
        for key, ident, tok in held:  # finish them so the backlog stays clean
            await client.patch(
                f"{base}/api/v1/issues/{ident}",
                json={"status": "done", "claimToken": tok},
                headers={"Authorization": f"Bearer {key}"},
            )
    return {
        "agents": len(held),
        "heartbeats": count,
        "per_s": round(count / elapsed, 1),
        "p50_ms": ms(percentile(lat, 50)),
        "p99_ms": ms(percentile(lat, 99)),
        "errors": dict(errors),
    }


# --- the raw-SQL limit ----------------------------------------------------------------

RAW_PICK = """
SELECT i.id FROM issues_issue i
WHERE i.project_id = %(p)s AND i.work AND NOT i.awaiting_triage AND i.status IN ('todo','doing','review')
  AND (i.lease_expires_at IS NULL OR i.lease_expires_at <= now())
  AND NOT EXISTS (SELECT 1 FROM issues_relation r JOIN issues_issue s ON s.id = r.source_id
                  WHERE r.target_id = i.id AND r.type = 'blocks' AND s.status NOT IN ('done','canceled'))
ORDER BY i.dispatch_rank, i.created_at, i.number LIMIT 1
"""


async def run_raw(
    db_url: str,
    project_id: int,
    org_id,
    key_id: int,
    user_id: int,
    n: int,
    budget: int,
    seconds: float,
    finish: bool,
    max_conns: int,
) -> Stats:
    import psycopg

    conns = min(n, max_conns)
    st = Stats(budget, time.monotonic() + seconds)
    lock = zlib.crc32(str(project_id).encode()) - 2**31

    async def worker():
        async with await psycopg.AsyncConnection.connect(db_url.replace("postgres://", "postgresql://")) as conn:
            while st.take():
                t0 = time.perf_counter()
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(7302, %s)", [lock])
                    row = await (await conn.execute(RAW_PICK, {"p": project_id})).fetchone()
                    if row is None:
                        st.claims -= 1
                        st.empty += 1
                        return
                    cur = await conn.execute(
                        "INSERT INTO leases_claim (org_id, issue_id, key_id, principal_id, kind, token_hash, created_at,"
                        " expires_at, last_heartbeat_at, end_reason) VALUES (%s,%s,%s,%s,'work',%s,now(),"
                        " now() + interval '30 minutes', now(), '') RETURNING id",
                        [org_id, row[0], key_id, user_id, sha256(secrets.token_bytes(32)).hexdigest()],
                    )
                    claim_id = (await cur.fetchone())[0]
                    cur = await conn.execute(
                        "UPDATE issues_issue SET status='doing', lease_claim_id=%s, lease_principal_id=%s,"
                        " lease_expires_at=now() + interval '30 minutes', updated_at=now()"
                        " WHERE id=%s AND (lease_claim_id IS NULL OR lease_expires_at <= now())",
                        [claim_id, user_id, row[0]],
                    )
                    assert cur.rowcount == 1
                st.lat.append(time.perf_counter() - t0)
                st.seen[str(row[0])] += 1
                if finish:
                    async with conn.transaction():
                        await conn.execute(
                            "UPDATE leases_claim SET ended_at=now(), end_reason='finished' WHERE id=%s", [claim_id]
                        )
                        await conn.execute(
                            "UPDATE issues_issue SET status='done', closed_at=now(), lease_claim_id=NULL,"
                            " lease_principal_id=NULL, lease_expires_at=NULL WHERE id=%s",
                            [row[0]],
                        )

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(conns)))
    st.elapsed = time.monotonic() - t0
    st.conns = conns
    if not finish:
        # A claim-only cell leaves its issues held. Finish them (untimed): left held, every
        # later pick would walk past them in the index and the raw limit would read low.
        async with await psycopg.AsyncConnection.connect(db_url.replace("postgres://", "postgresql://")) as conn:
            async with conn.transaction():
                held = "SELECT id FROM issues_issue WHERE project_id = %s AND status = 'doing'"
                await conn.execute(
                    f"UPDATE leases_claim SET ended_at = now(), end_reason = 'finished' WHERE ended_at IS NULL AND issue_id IN ({held})",
                    [project_id],
                )
                await conn.execute(
                    "UPDATE issues_issue SET status = 'done', closed_at = now(), lease_claim_id = NULL, lease_principal_id = NULL,"
                    " lease_expires_at = NULL WHERE project_id = %s AND status = 'doing'",
                    [project_id],
                )
    return st


# --- reporting ------------------------------------------------------------------------


def summary(st: Stats) -> dict:
    dup = sum(1 for v in st.seen.values() if v > 1)
    return {
        "claims": st.claims,
        "seconds": round(st.elapsed, 2),
        "claims_per_s": round(st.claims / st.elapsed, 1) if st.elapsed else 0,
        "p50_ms": ms(percentile(st.lat, 50)),
        "p95_ms": ms(percentile(st.lat, 95)),
        "p99_ms": ms(percentile(st.lat, 99)),
        "agent_dupes": dup,
        "errors": dict(st.errors),
    }


def db_checks(db_url: str) -> dict:
    import psycopg

    with psycopg.connect(db_url.replace("postgres://", "postgresql://")) as conn:
        multi = conn.execute(
            "SELECT count(*) FROM (SELECT issue_id FROM leases_claim GROUP BY issue_id HAVING count(*) > 1) x"
        ).fetchone()[0]
        held_twice = conn.execute(
            "SELECT count(*) FROM (SELECT issue_id FROM leases_claim WHERE ended_at IS NULL AND expires_at > now()"
            " GROUP BY issue_id HAVING count(*) > 1) x"
        ).fetchone()[0]
        done = conn.execute("SELECT count(*) FROM issues_issue WHERE status='done'").fetchone()[0]
        claims = conn.execute("SELECT count(*) FROM leases_claim").fetchone()[0]
    return {"issues_with_more_than_one_claim": multi, "issues_held_twice_now": held_twice, "done": done, "claim_rows": claims}


def py_spy(pid: int, seconds: int, out: str) -> subprocess.Popen | None:
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return None
    return subprocess.Popen(
        # --gil: only the thread holding the GIL is sampled, so the shares are of the
        # process's Python CPU time (threads waiting on the database or the GIL are out).
        [spy, "record", "-p", str(pid), "-d", str(seconds), "-r", "50", "--format", "raw", "-o", out, "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def top_frames(path: str, limit: int = 18) -> list[tuple[str, float]]:
    """Inclusive share of samples per function (collapsed stacks from py-spy --format raw)."""
    incl, total = Counter(), 0
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = {
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")" if " (" in f else f
            for f in stack.split(";")
        }
        for f in frames:
            incl[f] += c
    return [(f, round(100 * c / total, 1)) for f, c in incl.most_common(limit)] if total else []


_WRAPPERS = ("apps/mcp/asgi.py", "apps/core/graceful.py", "apps/core/handler.py")


def cpu_split(path: str) -> dict:
    """Share of the sampled CPU by layer: the project's code (and the ORM and driver calls
    it makes), Django/DRF request handling around it, and the server underneath (Daphne,
    Twisted, asyncio, asgiref thread hand-offs)."""
    split, total = Counter(), 0
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        # The project's ASGI wrappers (the /mcp router, graceful shutdown, the handler)
        # wrap every request; they are server plumbing here, not request work.
        frames = [f for f in stack.split(";") if not any(w in f for w in _WRAPPERS)]
        stack = ";".join(frames)
        if "(apps/" in stack:
            split["project code (apps/, with the ORM and driver under it)"] += c
        elif "rest_framework/" in stack or "django/" in stack:
            split["Django/DRF request handling"] += c
        else:
            split["server: Daphne, Twisted, asyncio, asgiref, threads (MCP: and the SDK)"] += c
    return {k: round(100 * v / total, 1) for k, v in split.most_common()} if total else {}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def main_async(o) -> int:
    facts = print_header("Retasc work-loop benchmark")
    ns = _ints(o.agents) if o.single else []
    procs, servers, scaled_agents = _ints(o.processes), [x for x in o.servers.split(",") if x], _ints(o.scaled_agents)
    scaled_projects = _ints(o.scaled_projects)
    projects16 = [f"P{k:02d}" for k in range(1, 17)]
    inst = new_instance("postgres", prefix="BENCH", db_prefix=o.db_prefix)
    report: dict = {"machine": facts, "sizes": vars(o), "cells": [], "scaled": []}
    server = None
    try:
        t0 = time.monotonic()
        seeds = {}
        if ns:
            s1 = seed(inst, projects=["BENCH"], issues=o.issues, keys=max(ns), key_projects=["BENCH"])
            s16 = seed(inst, projects=projects16, issues=max(1, o.issues // 16), keys=max(ns), key_projects=projects16)
            seeds["single"], seeds["sixteen_total_issues"] = s1["projects"], sum(p["issues"] for p in s16["projects"].values())
            keys1, keys16 = [k["key"] for k in s1["keys"]], [k["key"] for k in s16["keys"]]
        seed(inst, projects=["RAW"], issues=o.raw_issues, keys=1, key_projects=["RAW"])
        # pgbench recycles its project after each cell: a fixed backlog is enough.
        seed(inst, projects=["PGB"], issues=o.pgbench_pairs * 5 // 4, keys=1, key_projects=["PGB"])
        scaled_issues = 0
        if procs:
            per_deployment = len(scaled_agents) * 2 * o.scaled_budget + 8 * max(procs)
            scaled_issues = int(o.rounds * len(servers) * len(procs) * per_deployment * 1.1)
            scaled_keys = {}
            if 1 in scaled_projects:
                sc = seed(inst, projects=["SCALE"], issues=scaled_issues, keys=max(scaled_agents), key_projects=["SCALE"])
                scaled_keys[1] = [k["key"] for k in sc["keys"]]
            if 16 in scaled_projects:
                lanes = [f"S{k:02d}" for k in range(1, 17)]
                sc = seed(inst, projects=lanes, issues=scaled_issues // 8, keys=max(scaled_agents), key_projects=lanes)
                scaled_keys[16] = [k["key"] for k in sc["keys"]]
        seeds["seconds_total"] = round(time.monotonic() - t0, 1)
        report["seed"] = seeds
        print(
            f"seeded {o.issues if ns else 0} ready issues in BENCH (and split over P01..P16), {o.raw_issues} in RAW, "
            f"{o.pgbench_pairs * 5 // 4} in PGB, {scaled_issues} in SCALE in {seeds['seconds_total']} s",
            flush=True,
        )

        import psycopg

        def ids(prefix):
            with psycopg.connect(inst.db_url.replace("postgres://", "postgresql://")) as conn:
                project, org = conn.execute("SELECT id, org_id FROM orgs_project WHERE prefix=%s", [prefix]).fetchone()
                key, user = conn.execute(
                    "SELECT id, user_id FROM orgs_agentkey WHERE project_id=%s LIMIT 1", [project]
                ).fetchone()
            return project, org, key, user

        raw_project, raw_org, raw_key, raw_user = ids("RAW")
        pgb_project, pgb_org, pgb_key, pgb_user = ids("PGB")
        pgb_target = pg_claim.Target(inst.db_url, pgb_project, str(pgb_org), pgb_key, pgb_user)
        printed = []

        def pgbench(clients: int) -> dict:
            row = pg_claim.run_cell(pgb_target, clients, max(1, o.pgbench_pairs // clients))
            if row.get("command") and not printed:
                printed.append(1)
                print("pgbench command: " + row["command"], flush=True)
            return row

        async def raw_paired(n: int) -> float:
            rst = await run_raw(
                inst.db_url, raw_project, raw_org, raw_key, raw_user, n, o.raw_budget, o.raw_seconds, True, o.raw_max_conns
            )
            return summary(rst)["claims_per_s"]

        # The limits first: pgbench's C client, then psycopg (neither touches the server).
        raw = {}
        for n in _ints(o.pgbench_clients):
            row = pgbench(n)
            raw[("pgbench", n)] = row.get("claims_per_s")
            report["cells"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "command"}), flush=True)
        for n in ns:
            for finish in (False, True):
                st = await run_raw(
                    inst.db_url, raw_project, raw_org, raw_key, raw_user, n, o.raw_budget, o.raw_seconds, finish, o.raw_max_conns
                )
                row = {
                    "transport": "raw-sql",
                    "finish": finish,
                    "projects": 1,
                    "agents": n,
                    "connections": st.conns,
                    **summary(st),
                }
                raw[(n, finish)] = row["claims_per_s"]
                report["cells"].append(row)
                print(json.dumps(row), flush=True)
        if ns:
            server = start_daphne(inst)
            print(f"daphne pid {server.pid} on {server.base}", flush=True)
        profiles = {}
        for label, keys in (("1 project", keys1), ("16 projects", keys16)) if ns else ():
            for transport in ("http", "mcp"):
                for n in ns:
                    spy = None
                    if o.profile and n == 32 and label == "1 project":
                        prof = os.path.join(inst.data_dir, f"pyspy-{transport}-32.txt")
                        spy = py_spy(server.pid, int(o.seconds), prof)
                    paired = pgb_paired = None
                    if label == "1 project":
                        # The limits again, right before this cell: the ratio compares
                        # measurements taken seconds apart, not minutes (a shared machine
                        # drifts). pgbench at 32 clients pairs the 32-agent cells.
                        if n == 32 and o.pgbench_clients:
                            pgb_paired = pgbench(n).get("claims_per_s")
                        paired = await raw_paired(n)
                    runner = run_http if transport == "http" else run_mcp
                    cell_keys = keys
                    if label == "16 projects" and transport == "mcp":
                        # Key k works project k % 16: start MCP's cells on the projects
                        # HTTP's small cells touched least (in --quick, HTTP's 1-agent cell
                        # drains its one project, and MCP's would find it empty).
                        cell_keys = keys[8:] + keys[:8]
                    st = await runner(server.base, cell_keys, n, o.budget, o.seconds)
                    if spy:
                        try:
                            spy.wait(o.seconds + 30)
                        except subprocess.TimeoutExpired:
                            spy.kill()
                        profiles[transport] = {"cpu_split": cpu_split(prof), "top_frames": top_frames(prof)}
                    row = {
                        "transport": transport,
                        "finish": True,
                        "projects": 1 if label == "1 project" else 16,
                        "agents": n,
                        **summary(st),
                    }
                    if paired:
                        row["raw_paired_claims_per_s"] = paired
                    base = paired or raw.get((n, True))
                    row["ratio_vs_raw"] = round(row["claims_per_s"] / base, 3) if base else None
                    row["ratio_vs_raw_claim_only"] = (
                        round(row["claims_per_s"] / raw[(n, False)], 3) if raw.get((n, False)) else None
                    )
                    if pgb_paired:
                        row["pgbench_paired_claims_per_s"] = pgb_paired
                        row["ratio_vs_pgbench"] = round(row["claims_per_s"] / pgb_paired, 4)
                    row["daphne_rss_mb"] = server.rss_mb()
                    report["cells"].append(row)
                    print(json.dumps(row), flush=True)
        if ns:
            report["heartbeats_128"] = await run_heartbeats(server.base, keys1, max(ns), o.hb_seconds)
            print("heartbeats: " + json.dumps(report["heartbeats_128"]), flush=True)
            report["daphne_peak_rss_mb"] = server.peak_rss_mb()
            print(f"daphne peak RSS (VmHWM): {report['daphne_peak_rss_mb']} MB", flush=True)
            server.stop()
            server = None
        report["profiles"] = profiles
        if procs:
            report["scaled"] = await scaled_cells(
                o, inst, scaled_keys, procs, servers, scaled_agents, scaled_projects, pgbench, raw_paired
            )
        report["db_checks"] = db_checks(inst.db_url)
        print("db checks: " + json.dumps(report["db_checks"]), flush=True)
    finally:
        if server:
            server.stop()
        if not o.keep:
            inst.drop()

    if o.embedded and o.single:
        report["embedded"] = await embedded(o)

    # verdicts
    def cell(t, n, p=1):
        return next((c for c in report["cells"] if c["transport"] == t and c["agents"] == n and c["projects"] == p), None)

    verdict = {}
    h32, m32 = cell("http", 32), cell("mcp", 32)
    if h32:
        verdict["http_32_ratio"] = (
            h32["ratio_vs_raw"],
            TARGETS["http_ratio_32"],
            h32["ratio_vs_raw"] >= TARGETS["http_ratio_32"],
        )
        verdict["http_32_p99_ms"] = (h32["p99_ms"], TARGETS["p99_ms_32"], h32["p99_ms"] < TARGETS["p99_ms_32"])
    if m32:
        verdict["mcp_32_ratio"] = (m32["ratio_vs_raw"], TARGETS["mcp_ratio_32"], m32["ratio_vs_raw"] >= TARGETS["mcp_ratio_32"])
        verdict["mcp_32_p99_ms"] = (m32["p99_ms"], TARGETS["p99_ms_32"], m32["p99_ms"] < TARGETS["p99_ms_32"])
    h128 = cell("http", max(ns)) if ns else None
    if h128 and report.get("heartbeats_128"):
        x = report["heartbeats_128"]["per_s"] / max(h128["claims_per_s"], 0.001)
        verdict["heartbeats_vs_claims_128"] = (round(x, 2), TARGETS["heartbeat_x_claims"], x >= TARGETS["heartbeat_x_claims"])
    dupes = (
        report["db_checks"]["issues_with_more_than_one_claim"]
        + sum(c.get("agent_dupes", 0) + c.get("db_doubles", 0) for c in report["cells"])
        + sum(c.get("agent_dupes", 0) for c in report["scaled"])
    )
    errors = sum(sum(v for v in c.get("errors", {}).values() if isinstance(v, int)) for c in report["scaled"])
    verdict["double_claims"] = (dupes, 0, dupes == 0)
    report["verdict"] = verdict
    print("verdict (value, target, met): " + json.dumps(verdict), flush=True)
    if h32 and m32 and h32.get("ratio_vs_pgbench") and m32.get("ratio_vs_pgbench"):
        line = (
            f"MCP/HTTP pairs/s at 32 agents = {100 * m32['ratio_vs_pgbench']:.1f} % / {100 * h32['ratio_vs_pgbench']:.1f} %"
            f" of pgbench claim+finish in the same run (one Daphne: MCP {m32['claims_per_s']}/s beside pgbench"
            f" {m32['pgbench_paired_claims_per_s']}/s, HTTP {h32['claims_per_s']}/s beside {h32['pgbench_paired_claims_per_s']}/s)"
        )
        report["pgbench_ratio_line"] = line
        print(line, flush=True)
    if report["scaled"]:
        report["scaled_summary"] = scaled_summary(report["scaled"])
        for line in report["scaled_summary"]:
            print(line, flush=True)
        print(f"scaled cells: {errors} request errors, {dupes} double claims", flush=True)
    print(f"load average at the end: {os.getloadavg()}", flush=True)
    if o.json_out:
        os.makedirs(os.path.dirname(o.json_out) or ".", exist_ok=True)
        with open(o.json_out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0 if dupes == 0 else 1


# --- N web processes behind nginx ---------------------------------------------------------


async def scaled_cells(o, inst, keys_by_projects, procs, servers, agents, projects, pgbench, raw_paired) -> list:
    """The single-project cells through nginx in front of N web processes (bench.processes)."""
    import tempfile
    from pathlib import Path

    from bench.processes import Deployment, pg_wait_sampler

    rows: list = []
    workroot = Path(tempfile.mkdtemp(prefix="retasc-bench-scaled-"))
    # ABC then CBA: a drift of the shared machine over the run does not favour one deployment.
    order = [(r, srv, n) for r in range(o.rounds) for srv in servers for n in procs]
    order = [cell for r in range(o.rounds) for cell in (order if r % 2 == 0 else order[::-1]) if cell[0] == r]
    for r, srv, n in order:
        dep = Deployment(inst, n, server=srv, redis_url=o.redis_url, pool_size=o.pool_size, workdir=workroot / f"{srv}-{n}-{r}")
        t0 = time.monotonic()
        try:
            dep.up()
            print(f"scaled: round {r + 1}, nginx on {dep.base} -> {n} x {srv} (up in {time.monotonic() - t0:.1f} s)", flush=True)
            for cmd in dep.commands():
                print(f"  ran: {cmd}", flush=True)
            # Untimed warm-up: each process imports and connects lazily on its first requests.
            warm = keys_by_projects[projects[0]]
            await run_http(dep.base, warm, 2 * n, 6 * n, 15)
            await run_mcp(dep.base, warm, 2 * n, 6 * n, 15)
            for a, nproj, transport in [(a, p, t) for a in agents for p in projects for t in ("http", "mcp")]:
                keys = keys_by_projects[nproj]
                pgb = raw = None
                if a <= 32:
                    pgb = pgbench(a).get("claims_per_s")
                    raw = await raw_paired(a)
                sampler, stop = dep.sampler(), asyncio.Event()
                waits = asyncio.create_task(pg_wait_sampler(inst.db_url, stop))
                runner = run_http if transport == "http" else run_mcp
                st = await runner(dep.base, keys, a, o.scaled_budget, o.scaled_seconds, on_start=sampler.start)
                cpu = sampler.stop()
                stop.set()
                row = {
                    "transport": transport,
                    "server": srv,
                    "processes": n,
                    "round": r + 1,
                    "projects": nproj,
                    "agents": a,
                    **summary(st),
                    "cpu_s": cpu,
                    "web_cpu_ms_per_pair": round(1000 * cpu["web"] / st.claims, 1) if st.claims else None,
                    "pg_sessions": await waits,
                    **dep.memory(),
                    "loadavg": os.getloadavg()[0],
                }
                if pgb:
                    row["pgbench_paired_claims_per_s"] = pgb
                    row["ratio_vs_pgbench"] = round(row["claims_per_s"] / pgb, 4)
                if raw:
                    row["raw_paired_claims_per_s"] = raw
                    row["ratio_vs_raw"] = round(row["claims_per_s"] / raw, 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            dep.down()
    return rows


def scaled_summary(rows: list) -> list[str]:
    """One line per (server, processes, transport, agents), averaged over the rounds."""
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["server"], row["processes"], row["transport"], row["agents"], row["projects"]), []).append(row)

    def mean(vals, digits=1):
        vals = [v for v in vals if v is not None]
        return round(sum(vals) / len(vals), digits) if vals else None

    out = []
    for (srv, n, transport, a, nproj), cells in sorted(
        groups.items(), key=lambda kv: (kv[0][4], kv[0][3], kv[0][2], kv[0][0], kv[0][1])
    ):
        ratio = mean([100 * c["ratio_vs_pgbench"] for c in cells if c.get("ratio_vs_pgbench")])
        secs = [c["cpu_s"]["seconds"] for c in cells]
        per_core = {
            k: mean([c["cpu_s"][k] / s for c, s in zip(cells, secs, strict=True)], 2)
            for k in ("web", "postgres", "nginx", "client")
        }
        out.append(
            f"{transport.upper()} {a} agents, {nproj} project(s), {n} x {srv}: {mean([c['claims_per_s'] for c in cells])} pairs/s"
            f" ({', '.join(str(c['claims_per_s']) for c in cells)})"
            + (f", {ratio} % of pgbench" if ratio is not None else "")
            + f", next_issue p50/p95/p99 {mean([c['p50_ms'] for c in cells])}/{mean([c['p95_ms'] for c in cells])}"
            f"/{mean([c['p99_ms'] for c in cells])} ms, web CPU {mean([c['web_cpu_ms_per_pair'] for c in cells])} ms/pair;"
            f" cores busy: web {per_core['web']}, postgres {per_core['postgres']}, nginx {per_core['nginx']},"
            f" client {per_core['client']}, machine {mean([c['cpu_s']['machine_cores_busy'] for c in cells])} of {os.cpu_count()};"
            f" peak RSS per process {max(max(c['web_peak_rss_mb'] or [0]) for c in cells)} MB;"
            f" errors {sum(sum(v for v in c['errors'].values()) for c in cells)}, doubles {sum(c['agent_dupes'] for c in cells)}"
        )
    return out


async def embedded(o) -> list:
    """The embedded mode: SQLite, one Daphne process, N = 1, 8, 32."""
    inst = new_instance("sqlite", prefix="EMB")
    rows = []
    server = None
    try:
        s = seed(inst, projects=["EMB"], issues=o.embedded_issues, keys=32, key_projects=["EMB"])
        keys = [k["key"] for k in s["keys"]]
        server = start_daphne(inst)
        for transport in ("http", "mcp"):
            for n in (1, 8, 32):
                runner = run_http if transport == "http" else run_mcp
                st = await runner(server.base, keys, n, o.embedded_budget, o.seconds)
                row = {"transport": f"{transport} (sqlite)", "finish": True, "projects": 1, "agents": n, **summary(st)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if server:
            server.stop()
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (make bench-quick)")
    p.add_argument("--agents", default="1,8,32,128")
    p.add_argument("--issues", type=int, default=20000, help="ready issues in the single project (and split over 16)")
    p.add_argument("--raw-issues", type=int, default=20000)
    p.add_argument("--budget", type=int, default=1000, help="claims per cell at most")
    p.add_argument("--seconds", type=float, default=20, help="time cap per cell")
    p.add_argument("--raw-budget", type=int, default=1000)
    p.add_argument("--raw-seconds", type=float, default=5)
    p.add_argument("--raw-max-conns", type=int, default=40, help="PostgreSQL max_connections is shared; cap raw connections")
    p.add_argument("--hb-seconds", type=float, default=10)
    p.add_argument("--embedded", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--embedded-issues", type=int, default=2000)
    p.add_argument("--embedded-budget", type=int, default=300)
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True, help="py-spy the 32-agent cells")
    p.add_argument("--keep", action="store_true", help="keep the database")
    p.add_argument("--db-prefix", default="retasc_bench", help="name prefix of the database this run creates (and drops)")
    p.add_argument(
        "--single",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the one-Daphne cells (--no-single: only the scaled ones)",
    )
    g = p.add_argument_group("pgbench claim + finish (bench/pgbench/claim_finish.sql)")
    g.add_argument("--pgbench-clients", default="16,32", help="cells at the start; 32 also pairs each 32-agent cell ('' = none)")
    g.add_argument("--pgbench-pairs", type=int, default=3200, help="claim + finish pairs per pgbench cell")
    g = p.add_argument_group("N web processes behind nginx (deploy/scaled.py)")
    g.add_argument("--processes", default="", help="e.g. 1,2,3: run the scaled cells with that many web processes")
    g.add_argument("--servers", default="daphne", help="ASGI servers to compare, e.g. daphne,uvicorn")
    g.add_argument("--scaled-agents", default="32,128")
    g.add_argument("--scaled-projects", default="1", help="1 and/or 16: agents on one project, or spread over 16")
    g.add_argument("--scaled-budget", type=int, default=1000)
    g.add_argument("--scaled-seconds", type=float, default=20)
    g.add_argument("--rounds", type=int, default=2, help="each round starts every deployment once (order 1,2,3 then 3,2,1)")
    g.add_argument("--pool-size", type=int, default=12, help="RETASC_DB_POOL_SIZE of each web process")
    g.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--json-out", default="")
    o = p.parse_args()
    if o.quick:
        o.issues, o.raw_issues, o.budget, o.seconds, o.raw_budget, o.raw_seconds = 2000, 4000, 150, 8, 200, 2
        o.hb_seconds, o.embedded_issues, o.embedded_budget = 4, 500, 60
        o.pgbench_pairs, o.scaled_budget, o.scaled_seconds, o.rounds = 1280, 300, 10, 1
    sys.path.insert(0, str(ROOT))
    return asyncio.run(main_async(o))


if __name__ == "__main__":
    sys.exit(main())
