"""The pgbench claim + finish cell: bench/pgbench/claim_finish.sql run by pgbench's C client.

The same per-project serialized claim and finish as the psycopg raw cell of
``bench.work_loop`` (``run_raw``), statement for statement, on the same schema; only the
client differs. It is the physical limit of this machine's PostgreSQL for the claim
path, and the service cells are quoted as a ratio of it.

Each cell runs a bounded number of scripts (``clients x per_client``), never more than
the ready issues of its project, then recycles what it finished (untimed): after checking
that no issue was claimed twice in the cell, it deletes the cell's claim rows, puts the
issues back to ``todo`` and vacuums the two tables, so every cell starts from the same
backlog without seeding a new one each time.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass
from urllib.parse import urlparse

from bench.common import ROOT, ms, percentile

SCRIPT = ROOT / "bench" / "pgbench" / "claim_finish.sql"
VARIABLES = ("project", "lock", "org", "agent_key", "principal")


def project_lock(project_id: int) -> int:
    """The advisory key of a project's claim lock, as apps.leases.services takes it."""
    return zlib.crc32(str(project_id).encode()) - 2**31


def pgbench_binary() -> str | None:
    found = shutil.which("pgbench")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))
    return candidates[-1] if candidates else None


@dataclass
class Target:
    """The project the cell claims from and the identities its claim rows carry."""

    db_url: str
    project: int
    org: str
    agent_key: int
    principal: int

    def variables(self) -> dict[str, str]:
        return {
            "project": str(self.project),
            "lock": str(project_lock(self.project)),
            "org": self.org,
            "agent_key": str(self.agent_key),
            "principal": str(self.principal),
        }


def argv(target: Target, clients: int, per_client: int, log_prefix: str | None = None) -> list[str]:
    u = urlparse(target.db_url)
    cmd = [pgbench_binary() or "pgbench", "-h", u.hostname or "127.0.0.1", "-p", str(u.port or 5432)]
    if u.username:
        cmd += ["-U", u.username]
    cmd += ["-n", "-M", "prepared", "-f", str(SCRIPT), "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client)]
    for name, value in target.variables().items():
        cmd += ["-D", f"{name}={value}"]
    if log_prefix:
        cmd += ["-l", "--log-prefix", log_prefix]
    return [*cmd, u.path.lstrip("/")]


def parse_output(text: str) -> dict:
    """The figures of pgbench's summary: transactions, failures, latency average and tps
    (without the initial connection time)."""

    def num(pattern: str) -> float | None:
        m = re.search(pattern, text, re.MULTILINE)
        return float(m.group(1)) if m else None

    return {
        "transactions": int(num(r"^number of transactions actually processed: (\d+)") or 0),
        "failed": int(num(r"^number of failed transactions: (\d+)") or 0),
        "latency_avg_ms": num(r"^latency average = ([\d.]+) ms"),
        "tps": num(r"^tps = ([\d.]+) \(without initial connection time\)"),
    }


def _log_latencies(prefix: str) -> list[float]:
    """Per-script latency in seconds from pgbench's per-transaction logs (-l):
    ``client_id transaction_no time_us script_no time_epoch time_us_frac``."""
    out: list[float] = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2].isdigit():
                    out.append(int(parts[2]) / 1e6)
    return out


def _connect(db_url: str):
    import psycopg

    return psycopg.connect(db_url.replace("postgres://", "postgresql://"), autocommit=True)


def recycle(target: Target) -> dict:
    """After a cell: count issues claimed more than once in it, then put the project back
    as it was (claim rows deleted, issues ``todo`` and unleased), and vacuum."""
    with _connect(target.db_url) as conn:
        in_project = "SELECT id FROM issues_issue WHERE project_id = %s"
        doubles = conn.execute(
            f"SELECT count(*) FROM (SELECT issue_id FROM leases_claim WHERE issue_id IN ({in_project})"
            " GROUP BY issue_id HAVING count(*) > 1) x",
            [target.project],
        ).fetchone()[0]
        held = conn.execute(
            "SELECT count(*) FROM issues_issue WHERE project_id = %s AND status = 'doing'", [target.project]
        ).fetchone()[0]
        with conn.transaction():
            conn.execute(f"DELETE FROM leases_claim WHERE issue_id IN ({in_project})", [target.project])
            conn.execute(
                "UPDATE issues_issue SET status = 'todo', closed_at = NULL, lease_claim_id = NULL, lease_principal_id = NULL,"
                " lease_expires_at = NULL WHERE project_id = %s AND status <> 'todo'",
                [target.project],
            )
        conn.execute("VACUUM (ANALYZE) issues_issue, leases_claim")
    return {"db_doubles": doubles, "left_held": held}


def ready_issues(target: Target) -> int:
    with _connect(target.db_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM issues_issue WHERE project_id = %s AND status = 'todo'", [target.project]
        ).fetchone()[0]


def run_cell(target: Target, clients: int, per_client: int) -> dict:
    """One pgbench cell: ``clients`` connections, ``per_client`` claim + finish pairs each."""
    binary = pgbench_binary()
    if not binary:
        return {"transport": "pgbench", "skipped": "pgbench is not installed (Debian: postgresql-client)"}
    ready = ready_issues(target)
    if clients * per_client > ready:
        per_client = max(1, ready // clients)
    logdir = tempfile.mkdtemp(prefix="retasc-pgbench-")
    prefix = os.path.join(logdir, "pgbench")
    cmd = argv(target, clients, per_client, prefix)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=logdir, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    figures = parse_output(proc.stdout)
    lat = _log_latencies(prefix)
    shutil.rmtree(logdir, ignore_errors=True)
    row = {
        "transport": "pgbench",
        "finish": True,
        "projects": 1,
        "agents": clients,
        "connections": clients,
        "claims": figures["transactions"],
        "seconds": round(figures["transactions"] / figures["tps"], 2) if figures["tps"] else round(wall, 2),
        "claims_per_s": round(figures["tps"], 1) if figures["tps"] else 0,
        # pgbench times the whole script (claim + finish); the service cells time the claim.
        "pair_p50_ms": ms(percentile(lat, 50)),
        "pair_p95_ms": ms(percentile(lat, 95)),
        "pair_p99_ms": ms(percentile(lat, 99)),
        "errors": {"failed": figures["failed"]} if figures["failed"] or proc.returncode else {},
        "command": shlex.join(cmd[:-1] + ["<database>"]).replace(prefix, "<logdir>/pgbench"),
    }
    if proc.returncode:
        row["errors"]["exit"] = proc.returncode
        row["errors"]["stderr"] = proc.stderr[-300:]
    checks = recycle(target)
    row["agent_dupes"] = 0
    row["db_doubles"] = checks["db_doubles"]
    return row
