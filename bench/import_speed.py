"""How long an import of 10,000 issues takes, and what a batch (one transaction) costs.

Generates a Retasc export of ``--issues`` issues (each with ``--comments`` comments, one
in four with a ``blocks`` edge, one in ten a container with children, labels, due dates),
then in a fresh database (SQLite by default; ``--postgres-url`` for a PostgreSQL
database you own: its public schema is emptied first):

1. imports it whole (``import_run``: the path ``manage.py import_file`` and the API take),
   timing it and counting SQL statements, and checks the chain;
2. with ``--batch-sizes``, imports ``--batch-issues`` issues into fresh orgs at each batch
   size, alternating the sizes over ``--rounds`` rounds (the machine is noisy), and
   reports statements per issue (deterministic) beside the seconds.

    .venv/bin/python -m bench.import_speed [--issues 10000] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import ROOT, Instance, new_instance, print_header, run_measure


def generate(n: int, comments: int, prefix: str = "GEN") -> dict:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    people = [f"person{k}@gen.test" for k in range(1, 21)]
    issues = []
    for i in range(1, n + 1):
        created = base + timedelta(minutes=i)
        container = i % 10 == 1
        issue = {
            "identifier": f"{prefix}-{i}",
            "project": prefix,
            "number": i,
            "title": f"Generated issue {i} about the {('parser', 'queue', 'cache', 'login')[i % 4]}",
            "body": f"Body of issue {i}.\n\nSome words to index: alpha beta gamma {i}.",
            "status": ("todo", "doing", "done", "canceled", "blocked")[i % 5] if not container else "todo",
            "priority": i % 5,
            "work": not container,
            "assignee": people[i % 20] if i % 3 else None,
            "author": people[(i + 1) % 20],
            "labels": [("bug", "feature", "infra")[i % 3]],
            "dueAt": (created + timedelta(days=30)).isoformat() if i % 4 == 0 else None,
            "parent": f"{prefix}-{i - (i - 1) % 10}" if not container and i - (i - 1) % 10 >= 1 else None,
            "cancelReason": "Not needed" if i % 5 == 3 and not container else None,
            "createdAt": created.isoformat(),
            "updatedAt": created.isoformat(),
            "closedAt": (created + timedelta(days=1)).isoformat() if i % 5 in (2, 3) and not container else None,
            "relations": [{"type": "blocks", "target": f"{prefix}-{i + 1}"}] if i % 4 == 2 and i < n else [],
            "comments": [
                {
                    "id": f"c{i}-{k}",
                    "author": people[(i + k) % 20],
                    "runtime": "dash",
                    "body": f"Comment {k} on {i}",
                    "createdAt": (created + timedelta(minutes=k + 1)).isoformat(),
                }
                for k in range(comments)
            ],
            "checkpoints": [],
            "attachments": [],
        }
        issues.append(issue)
    return {
        "format": "retasc-export",
        "version": 1,
        "exportedAt": base.isoformat(),
        "org": {"slug": "gen", "name": "Generated", "timezone": "UTC", "createdAt": base.isoformat()},
        "projects": [{"prefix": prefix, "name": "Generated", "issues": n, "createdAt": base.isoformat()}],
        "members": [{"email": p, "name": p.split("@")[0], "role": "member", "status": "active"} for p in people],
        "labels": [{"name": name, "color": "#6b7280"} for name in ("bug", "feature", "infra")],
        "issues": issues,
        "activity": [],
    }


def measure_main(argv) -> None:
    """In the instance's environment: import the file into a fresh org, print figures."""
    p = argparse.ArgumentParser()
    p.add_argument("--file", required=True)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--org-name", default="Import bench")
    o = p.parse_args(argv)
    import django

    django.setup()
    from django.db import connection

    from apps.intake.imports import base
    from apps.intake.imports.services import import_run, import_start
    from apps.issues.chain import verify_org
    from apps.orgs.models import Membership, Org
    from apps.orgs.services import actor_for_human, org_create

    if o.batch:
        base.BATCH = o.batch
        from apps.intake.imports import retasc_source

        retasc_source.BATCH = o.batch
    owner = Membership.objects.filter(role="owner").select_related("user").order_by("pk").first().user
    org = org_create(name=o.org_name, owner=owner)
    actor = actor_for_human(user=owner, org=org)
    data = Path(o.file).read_bytes()
    statements = [0]

    def count(execute, sql, params, many, context):
        statements[0] += 1
        return execute(sql, params, many, context)

    t0, cpu0 = time.perf_counter(), time.process_time()
    with connection.execute_wrapper(count):
        job = import_start(actor=actor, source="retasc", upload=data, launch=False)
        job = import_run(job.pk)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    t1 = time.perf_counter()
    broken = verify_org(Org.objects.get(pk=org.pk))
    verify_s = time.perf_counter() - t1
    issues = job.counts.get("issues", 0)
    print(
        json.dumps(
            {
                "status": job.status,
                "batch": o.batch or base.BATCH,
                "issues": issues,
                "comments": job.counts.get("comments", 0),
                "relations": job.counts.get("relations", 0),
                "errors": job.counts.get("errors", 0),
                "seconds": round(seconds, 2),
                "issues_per_s": round(issues / seconds, 1) if seconds else None,
                "cpu_s": round(cpu, 2),
                "statements": statements[0],
                "statements_per_issue": round(statements[0] / max(issues, 1), 2),
                "receipts": Org.objects.get(pk=org.pk).activity_seq,
                "chain_ok": broken is None,
                "verify_s": round(verify_s, 2),
            }
        )
    )


def _reset_postgres(url: str) -> None:
    import psycopg  # noqa: PLC0415 - defer: only the PostgreSQL run needs the driver

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def _instance(postgres_url: str | None) -> Instance:
    if not postgres_url:
        return new_instance("sqlite")
    _reset_postgres(postgres_url)
    inst = Instance(db_url=postgres_url, data_dir=tempfile.mkdtemp(prefix="retasc-import-bench-"))
    inst.manage("migrate", "--noinput", "-v0")
    out = json.loads(inst.manage("bootstrap", "--org", "Bench", "--project", "BENCH", "--email", inst.email, "--json"))
    inst.org_slug = out.get("orgSlug") or out.get("slug") or "bench"
    return inst


def _measure(inst: Instance, path: str, batch: int = 0, name: str = "Import bench") -> dict:
    args = ["--file", path, "--org-name", name] + (["--batch", str(batch)] if batch else [])
    return run_measure(inst, "bench.import_speed", *args, timeout=7200)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--issues", type=int, default=10000)
    p.add_argument("--comments", type=int, default=2)
    p.add_argument("--postgres-url", help="A PostgreSQL database you own (its public schema is emptied).")
    p.add_argument("--batch-sizes", default="", help="e.g. 20,200,1000: compare batch sizes too")
    p.add_argument("--batch-issues", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2)
    o = p.parse_args()
    print_header("Retasc import speed")
    work = Path(tempfile.mkdtemp(prefix="retasc-import-gen-"))
    big = work / "export.json"
    big.write_text(json.dumps(generate(o.issues, o.comments)))
    inst = _instance(o.postgres_url)
    try:
        print(f"database: {'postgresql' if o.postgres_url else 'sqlite'}")
        whole = _measure(inst, str(big))
        print(json.dumps({"whole": whole}, indent=1))
        sizes = [int(s) for s in o.batch_sizes.split(",") if s.strip()]
        if sizes:
            small = work / "small.json"
            small.write_text(json.dumps(generate(o.batch_issues, o.comments)))
            rows = []
            for r in range(o.rounds):
                for size in sizes if r % 2 == 0 else list(reversed(sizes)):
                    rows.append(_measure(inst, str(small), size, name=f"Batch {size} round {r}"))
            print(
                json.dumps(
                    {
                        "batches": [
                            {k: row[k] for k in ("batch", "issues", "seconds", "cpu_s", "statements_per_issue", "chain_ok")}
                            for row in rows
                        ]
                    },
                    indent=1,
                )
            )
    finally:
        inst.drop(remove_data_dir=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
