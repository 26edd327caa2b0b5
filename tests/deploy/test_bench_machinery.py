"""The benchmark's machinery for issue 15: the pgbench claim + finish script, the ASGI
server choice of the scaled mode, and N web processes behind nginx.

* bench/pgbench/claim_finish.sql parses and, run by pgbench with many clients at once on
  the real schema, claims and finishes each issue exactly once (the limit the bench
  quotes must be a correct claim, not a faster wrong one); the bench's recycle puts the
  project back as it was.
* deploy/scaled.py's web command for each server, and a refusal for an unknown one.
* Three web processes behind nginx (the site of deploy/nginx), no Celery: agents over
  HTTP through the proxy finish every issue exactly once, and every process served claims.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections import Counter

import pytest

from bench import pg_claim
from deploy.scaled import SERVERS, ScaledRun, nginx_binary, web_command
from tests.conftest import needs_postgres, new_issue
from tests.live import free_port

needs_pgbench = pytest.mark.skipif(not pg_claim.pgbench_binary(), reason="needs pgbench (Debian: postgresql-client)")


def _db_url(name: str | None = None) -> str:
    from urllib.parse import quote

    from django.conf import settings

    db = settings.DATABASES["default"]
    auth = quote(db.get("USER") or "") + (":" + quote(db["PASSWORD"]) if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{name or db['NAME']}"


# --- pgbench ----------------------------------------------------------------------------


@needs_postgres
@needs_pgbench
@pytest.mark.slow
def test_the_pgbench_script_claims_and_finishes_each_issue_exactly_once(tworld):
    from django.db import connection

    from apps.issues.models import Claim, Issue
    from apps.orgs.models import AgentKey

    issues = [new_issue(tworld.a, f"Task {i}") for i in range(60)]
    other = new_issue(tworld.x, "Another org's issue")  # a different project: never touched
    key = AgentKey.objects.get(org=tworld.org, user=tworld.owner, parent__isnull=True, admin=True)
    target = pg_claim.Target(
        _db_url(connection.settings_dict["NAME"]), tworld.project.pk, str(tworld.org.pk), key.pk, tworld.owner.pk
    )
    assert pg_claim.ready_issues(target) == 60

    clients, per_client = 8, 6  # 48 pairs from 8 connections at once, 12 issues left over
    done = subprocess.run(pg_claim.argv(target, clients, per_client), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    figures = pg_claim.parse_output(done.stdout)
    assert (figures["transactions"], figures["failed"]) == (48, 0)
    assert figures["tps"] > 0

    claims = list(Claim.objects.filter(issue__project=tworld.project).values_list("issue_id", "end_reason", "key_id"))
    per_issue = Counter(issue for issue, _, _ in claims)
    assert len(per_issue) == 48 and set(per_issue.values()) == {1}  # 48 issues, one claim each
    assert {(reason, k) for _, reason, k in claims} == {("finished", key.pk)}
    statuses = Counter(Issue.objects.filter(project=tworld.project).values_list("status", flat=True))
    assert statuses == {"done": 48, "todo": 12}
    assert not Issue.objects.filter(project=tworld.project, lease_claim_id__isnull=False).exists()
    # The pick's order: the 48 done are the first 48 in dispatch order (equal ranks here).
    done_numbers = sorted(Issue.objects.filter(project=tworld.project, status="done").values_list("number", flat=True))
    assert done_numbers == sorted(i.number for i in issues)[:48]

    assert pg_claim.recycle(target) == {"db_doubles": 0, "left_held": 0}
    assert pg_claim.ready_issues(target) == 60
    assert not Claim.objects.filter(issue__project=tworld.project).exists()
    other.refresh_from_db()
    assert other.status == "todo"


def test_parse_output_reads_pgbench_summary():
    text = (
        "number of transactions actually processed: 800/800\nnumber of failed transactions: 0 (0.000%)\n"
        "latency average = 26.066 ms\ninitial connection time = 38.344 ms\ntps = 613.830208 (without initial connection time)\n"
    )
    assert pg_claim.parse_output(text) == {"transactions": 800, "failed": 0, "latency_avg_ms": 26.066, "tps": 613.830208}


def test_the_project_lock_is_the_servers():
    import inspect

    from apps.leases import services

    # The server takes pg_advisory_xact_lock(7302, crc32(str(project_id)) - 2**31).
    assert "zlib.crc32(str(project_id).encode()) - 2**31" in inspect.getsource(services)
    assert pg_claim.project_lock(1) == __import__("zlib").crc32(b"1") - 2**31
    assert "pg_advisory_xact_lock(7302, :lock)" in pg_claim.SCRIPT.read_text()


# --- the server choice --------------------------------------------------------------------


def test_web_command_per_server():
    assert SERVERS[0] == "daphne"  # the default every deployment file runs
    assert web_command("127.0.0.1", 8001) == web_command("127.0.0.1", 8001, "daphne")
    uv = web_command("127.0.0.1", 8001, "uvicorn")
    assert uv[0] == "uvicorn" and uv[-1] == "retasc.asgi:application"
    assert uv[uv.index("--host") + 1] == "127.0.0.1" and uv[uv.index("--port") + 1] == "8001"
    assert "--proxy-headers" in uv and uv[uv.index("--timeout-graceful-shutdown") + 1] == "20"
    with pytest.raises(ValueError, match="unknown server"):
        web_command("127.0.0.1", 8001, "gunicorn")


# --- N processes behind nginx ---------------------------------------------------------------

PROCESSES = 3
ISSUES = 90
AGENTS = 12


async def _drain(base: str, key: str) -> tuple[Counter, Counter]:
    """AGENTS agents over HTTP through nginx: claim, finish, until the queue is empty."""
    import httpx2

    seen, errors = Counter(), Counter()
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(base_url=base, headers=auth, timeout=60) as c:

        async def agent():
            for _ in range(ISSUES):  # bounded: never more pulls than issues
                r = await c.post("/api/v1/work/next", json={})
                if r.status_code != 200:
                    errors[f"next {r.status_code}"] += 1
                    continue
                data = r.json()
                if data.get("issue") is None:
                    return
                ident = data["issue"]["identifier"]
                seen[ident] += 1
                r = await c.patch(f"/api/v1/issues/{ident}", json={"status": "done", "claimToken": data["claimToken"]})
                if r.status_code != 200:
                    errors[f"done {r.status_code}"] += 1

        await asyncio.gather(*(agent() for _ in range(AGENTS)))
    return seen, errors


@needs_postgres
@pytest.mark.slow
@pytest.mark.skipif(not nginx_binary(), reason="needs nginx (apt-get install nginx)")
def test_three_web_processes_behind_nginx_finish_each_issue_once(tmp_path):
    import json

    import psycopg
    from django.conf import settings

    name = f"{settings.DATABASES['default']['NAME']}_scaled{PROCESSES}"
    admin = _db_url("postgres").replace("postgres://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    run = ScaledRun(
        database_url=_db_url(name),
        redis_url=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
        workdir=tmp_path,
        port=free_port(),
        web_ports=[free_port() for _ in range(PROCESSES)],
        # One key for all agents: its claim cap (live claims at once) above the agent count.
        extra_env={
            "RETASC_API_RATE": "100000/min",
            "RETASC_CLAIM_CAP": "64",
            "RETASC_DB_POOL_SIZE": "4",
            "RETASC_LOG_LEVEL": "WARNING",
        },
    )
    try:
        run.up(jobs=False)
        assert sorted(run.procs) == sorted(["nginx", *(f"web-{p}" for p in run.web_ports)])  # no Celery
        boot = run.manage("bootstrap", "--org", "Three", "--project", "WORK", "--email", "owner@three.test", "--json")
        assert boot.returncode == 0, boot.stderr[-2000:]
        key = json.loads(boot.stdout.strip().splitlines()[-1])["agentKey"]

        async def create():
            import httpx2

            async with httpx2.AsyncClient(base_url=run.base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
                for i in range(ISSUES):
                    r = await c.post("/api/v1/issues", json={"title": f"Task {i}", "work": True, "noDependency": "independent"})
                    assert r.status_code == 201, r.text

        asyncio.run(create())
        seen, errors = asyncio.run(_drain(run.base, key))
        assert errors == Counter()
        assert len(seen) == ISSUES and set(seen.values()) == {1}  # every issue handed out once
        with psycopg.connect(_db_url(name).replace("postgres://", "postgresql://")) as conn:
            claims = conn.execute("SELECT issue_id, count(*) FROM leases_claim GROUP BY issue_id").fetchall()
            done = conn.execute("SELECT count(*) FROM issues_issue WHERE status = 'done'").fetchone()[0]
        assert len(claims) == ISSUES and {n for _, n in claims} == {1} and done == ISSUES
        # nginx spread the claims over every process.
        log = (tmp_path / "nginx" / "logs" / "access.log").read_text().splitlines()
        served = Counter(
            int(m.group(1))
            for line in log
            if "/api/v1/work/next" in line and (m := re.search(r"upstream=127\.0\.0\.1:(\d+)", line))
        )
        assert set(served) == set(run.web_ports), served
    finally:
        run.down()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
