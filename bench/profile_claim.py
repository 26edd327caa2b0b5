"""Where one claim + finish spends its CPU, in-process (no HTTP), on PostgreSQL.

Seeds a fresh database, then repeats what an agent does per issue, calling the same
operations the HTTP API and MCP call: authenticate the key, ``next_issue``,
authenticate again, ``save_issue status=done`` with the claim token. Prints the CPU
time (process time, so other load on the machine matters less than for wall time) of
each step, the SQL statements each step sends, and optionally a cProfile of the loop
(with its function-call count per claim + finish, a deterministic measure).

    .venv/bin/python -m bench.profile_claim [--loops 200] [--cprofile 30] [--statements]
        [--database NAME]

``--statements`` also prints the text of every statement of one claim + finish.
``--database NAME`` runs on that PostgreSQL database (dropped and created afresh)
instead of a new ``retasc_bench_<ts>`` one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import ROOT, new_instance, print_header, run_measure, seed
from bench.processes import cpu_seconds


def _backend_pid(connection) -> int | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def _prepared(connection) -> dict | None:
    """How many statements this connection has prepared, and the plans they used."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements"
        )
        n, generic, custom = cur.fetchone()
    return {"count": n, "generic_plans": int(generic), "custom_plans": int(custom)}


def measure_main(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--key", required=True)
    p.add_argument("--loops", type=int, default=200)
    p.add_argument("--cprofile", type=int, default=0)
    p.add_argument("--statements", action="store_true")
    p.add_argument("--http", action="store_true")
    o = p.parse_args(argv)
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.orgs.services import agent_key_authenticate
    from apps.tools import operations as ops

    cpu = {"auth": 0.0, "next_issue": 0.0, "done": 0.0}

    def timed(name, fn):
        t0 = time.process_time()
        result = fn()
        cpu[name] += time.process_time() - t0
        return result

    if o.http:
        from django.test import Client

        client = Client(HTTP_AUTHORIZATION=f"Bearer {o.key}", HTTP_HOST="127.0.0.1")

        def post(path, body, method="post"):
            r = getattr(client, method)(path, body, content_type="application/json")
            assert r.status_code == 200, (r.status_code, r.content[:300])
            return json.loads(r.content)

        def one_http():
            got = timed("next_issue", lambda: post("/api/v1/work/next", {}))
            ident = got["issue"]["identifier"]
            timed("done", lambda: post(f"/api/v1/issues/{ident}", {"status": "done", "claimToken": got["claimToken"]}, "patch"))

    def one():
        actor = timed("auth", lambda: agent_key_authenticate(o.key))
        got = timed("next_issue", lambda: ops.next_issue(actor))
        actor = timed("auth", lambda: agent_key_authenticate(o.key))
        timed(
            "done",
            lambda: ops.save_issue(actor, identifier=got["issue"]["identifier"], status="done", claimToken=got["claimToken"]),
        )

    if o.http:  # the same loop through Django, DRF and the API views (Django's test client)
        one = one_http
    for _ in range(5):  # warm: pool, caches, the first compiled statements
        one()
    with CaptureQueriesContext(connection) as q:
        marks = [0]
        actor = agent_key_authenticate(o.key)
        marks.append(len(q.captured_queries))
        got = ops.next_issue(actor)
        marks.append(len(q.captured_queries))
        actor = agent_key_authenticate(o.key)
        marks.append(len(q.captured_queries))
        ops.save_issue(actor, identifier=got["issue"]["identifier"], status="done", claimToken=got["claimToken"])
        marks.append(len(q.captured_queries))
    statements = {
        "auth": marks[1] - marks[0],
        "next_issue": marks[2] - marks[1],
        "done": marks[4] - marks[3],
    }
    statements["claim_and_done_total"] = marks[4]
    texts = [" ".join(c["sql"].split()) for c in q.captured_queries]
    steps = ["auth"] * marks[1] + ["next_issue"] * (marks[2] - marks[1]) + ["auth"] * (marks[3] - marks[2])
    steps += ["done"] * (marks[4] - marks[3])
    cpu = dict.fromkeys(cpu, 0.0)
    backend = _backend_pid(connection)
    pg0 = cpu_seconds(backend) if backend else None
    t0 = time.perf_counter()
    for _ in range(o.loops):
        one()
    wall = time.perf_counter() - t0
    pg1 = cpu_seconds(backend) if backend and backend == _backend_pid(connection) else None
    out = {
        "loops": o.loops,
        "cpu_ms": {k: round(1000 * v / o.loops, 2) for k, v in cpu.items()},
        "cpu_ms_per_claim_and_done": round(1000 * sum(cpu.values()) / o.loops, 2),
        "wall_ms_per_claim_and_done": round(1000 * wall / o.loops, 2),
        # The PostgreSQL backend serving this process's connection (same machine), over
        # the same loops: the database's side of the cost.
        "pg_backend_cpu_ms_per_claim_and_done": (
            round(1000 * (pg1 - pg0) / o.loops, 2) if pg0 is not None and pg1 is not None else None
        ),
        "server_side_binding": bool(connection.settings_dict["OPTIONS"].get("server_side_binding")),
        "prepared_statements": _prepared(connection),
        "sql_statements": statements,
    }
    if o.statements:
        out["statement_texts"] = [f"{step}: {text}" for step, text in zip(steps, texts, strict=True)]
    if o.cprofile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile(time.process_time)
        prof.enable()
        for _ in range(o.cprofile):
            one()
        prof.disable()
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        out["cprofile_calls_per_claim_and_done"] = round(stats.total_calls / o.cprofile)
        stats.sort_stats("tottime").print_stats(25)
        out["cprofile_tottime_top25"] = text.getvalue()
    print(json.dumps(out))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--issues", type=int, default=3000)
    p.add_argument("--loops", type=int, default=200)
    p.add_argument("--cprofile", type=int, default=0, help="also cProfile this many loops (CPU time)")
    p.add_argument("--statements", action="store_true", help="print the statements of one claim + finish")
    p.add_argument("--database", help="run on this PostgreSQL database (dropped and created afresh)")
    p.add_argument("--http", action="store_true", help="loop through the HTTP API (Django's test client, no server)")
    o = p.parse_args()
    print_header("Retasc claim profile")
    inst = new_instance("postgres", name=o.database)
    try:
        s = seed(inst, projects=["BENCH"], issues=max(o.issues, o.loops + o.cprofile + 10), keys=1)
        args = ["--key", s["keys"][0]["key"], "--loops", str(o.loops), "--cprofile", str(o.cprofile)]
        if o.statements:
            args.append("--statements")
        if o.http:
            args.append("--http")
        result = run_measure(inst, "bench.profile_claim", *args)
        profile = result.pop("cprofile_tottime_top25", None)
        texts = result.pop("statement_texts", None)
        print(json.dumps(result, indent=1))
        for n, text in enumerate(texts or (), 1):
            print(f"{n:3d} {text}")
        if profile:
            print(profile)
    finally:
        inst.drop(remove_data_dir=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
