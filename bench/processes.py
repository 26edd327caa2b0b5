"""The work loop against N web processes behind nginx (the scaled mode of deploy/).

``deploy/scaled.py``'s ``ScaledRun`` starts nginx (the site generated from
deploy/nginx/retasc.conf, on loopback) and N web processes (Daphne, or another ASGI
server of ``deploy.scaled.SERVERS``) on the bench's database and Redis; the 32-agent
(and 128-agent) single-project HTTP and MCP cells of ``bench.work_loop`` then run
through nginx. Each cell records, beside claims/s and ``next_issue`` latency:

* process CPU (utime + stime from /proc/<pid>/stat, over the cell) of the web processes,
  of nginx (master and workers), of the database's PostgreSQL backends and of the load
  client, and the machine's busy share (/proc/stat): where the CPU went, and whether the
  machine was saturated;
* CPU per claim + finish: the web processes' CPU over the pairs finished;
* what the database sessions were doing (``pg_stat_activity`` sampled twice a second):
  waiting on the project's claim lock, on the org's rank refresh lock or on a row, idle
  in a transaction (the server between two statements), running, or idle;
* resident memory of each web process (VmRSS after the cell, VmHWM over the run).

Deployments are started per (round, server, N) and stopped after their cells; rounds go
1, 2, 3 then 3, 2, 1, so a drift of the shared machine does not favour one N.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

from bench.common import Instance, free_port, proc_status_kb

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- CPU accounting from /proc ---------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process, in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine since boot."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return total - idle, total


class CpuSampler:
    """CPU of named groups of processes between ``start()`` and ``stop()``. A group is a
    function returning its pids now (processes come and go: a pid first seen at the end
    counts from zero)."""

    def __init__(self, groups: dict):
        self.groups = groups

    def _snap(self) -> dict:
        snap = {}
        for name, pids in self.groups.items():
            snap[name] = {pid: cpu_seconds(pid) for pid in pids()}
        return snap

    def start(self) -> None:
        self.t0, self.before, self.m0 = time.monotonic(), self._snap(), machine_cpu()
        self.client0 = sum(os.times()[:2])

    def stop(self) -> dict:
        elapsed, after, m1 = time.monotonic() - self.t0, self._snap(), machine_cpu()
        out = {"seconds": round(elapsed, 2)}
        for name in self.groups:
            total = 0.0
            for pid, cpu in after[name].items():
                if cpu is not None:
                    total += cpu - (self.before[name].get(pid) or 0.0)
            out[name] = round(total, 2)
        out["client"] = round(sum(os.times()[:2]) - self.client0, 2)
        busy, total = m1[0] - self.m0[0], m1[1] - self.m0[1]
        out["machine_busy_pct"] = round(100 * busy / total, 1) if total else None
        out["machine_cores_busy"] = round(busy / CLK_TCK / elapsed, 2) if elapsed else None
        return out


async def pg_wait_sampler(db_url: str, stop: asyncio.Event, every: float = 0.5) -> dict:
    """Mean number of the database's client sessions in each state, sampled ``every`` s."""
    import psycopg

    counts, samples = Counter(), 0
    async with await psycopg.AsyncConnection.connect(db_url.replace("postgres://", "postgresql://"), autocommit=True) as conn:
        while not stop.is_set():
            cur = await conn.execute(
                "SELECT coalesce(wait_event_type, '') || ':' || coalesce(wait_event, ''), state, left(query, 60)"
                " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            )
            for wait, state, query in await cur.fetchall():
                # Two advisory locks: 7302 is a project's claim lock (apps.leases), 7301 an
                # org's rank refresh (apps.issues.ranking); the statement names its key.
                if wait == "Lock:advisory" and "7301" in query:
                    counts["waiting on the org's rank refresh lock"] += 1
                elif wait == "Lock:advisory":
                    counts["waiting on the project's claim lock"] += 1
                elif wait.startswith("Lock:"):
                    counts[f"waiting on a row or transaction lock ({wait})"] += 1
                elif state == "idle in transaction":
                    counts["idle in transaction (the server between statements)"] += 1
                elif state == "active":
                    counts["running a statement"] += 1
                else:
                    counts["idle (pooled)"] += 1
            samples += 1
            try:
                await asyncio.wait_for(stop.wait(), every)
            except TimeoutError:
                pass
    return {k: round(v / samples, 1) for k, v in counts.most_common()} if samples else {}


def pg_backend_pids(db_url: str) -> list[int]:
    import psycopg

    with psycopg.connect(db_url.replace("postgres://", "postgresql://"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [r[0] for r in rows]


# --- a deployment -----------------------------------------------------------------------


class Deployment:
    """nginx + ``n`` web processes on the instance's database, data directory and keys."""

    def __init__(self, inst: Instance, n: int, *, server: str, redis_url: str, pool_size: int, workdir: Path):
        from deploy.scaled import ScaledRun

        self.inst, self.n, self.server = inst, n, server
        data = Path(inst.data_dir)
        self.run = ScaledRun(
            database_url=inst.db_url,
            redis_url=redis_url,
            workdir=workdir,
            port=free_port(),
            web_ports=[free_port() for _ in range(n)],
            server=server,
            extra_env={
                # The instance's data directory and secrets (the seeded titles are sealed with them).
                "RETASC_DATA_DIR": str(data),
                "RETASC_KEYSTORE_DIR": str(data / "keys"),
                "RETASC_MASTER_KEY_FILE": str(data / "master_key"),
                "DJANGO_SECRET_KEY_FILE": str(data / "secret_key"),
                "RETASC_API_RATE": "1000000/min",  # the throttle is not what we measure
                "RETASC_LOG_LEVEL": "WARNING",
                "RETASC_DB_POOL_SIZE": str(pool_size),
            },
        )
        self.base = self.run.base

    def up(self) -> Deployment:
        # Migrated and seeded already; no Celery (the single-Daphne cells run without it too).
        self.run.up(setup=False, jobs=False)
        return self

    def down(self) -> None:
        self.run.down()

    def web_pids(self) -> list[int]:
        return [p.pid for name, p in self.run.procs.items() if name.startswith("web-") and p.alive()]

    def nginx_pids(self) -> list[int]:
        nginx = self.run.procs.get("nginx")
        return [nginx.pid, *children(nginx.pid)] if nginx and nginx.alive() else []

    def sampler(self) -> CpuSampler:
        return CpuSampler(
            {
                "web": self.web_pids,
                "nginx": self.nginx_pids,
                "postgres": lambda: pg_backend_pids(self.inst.db_url),
            }
        )

    def memory(self) -> dict:
        pids = self.web_pids()
        return {
            "web_rss_mb": [proc_status_kb(pid, "VmRSS") for pid in pids],
            "web_peak_rss_mb": [proc_status_kb(pid, "VmHWM") for pid in pids],
        }

    def commands(self) -> list[str]:
        import shlex

        return [shlex.join(p.argv) for p in self.run.procs.values()]
