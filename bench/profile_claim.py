"""Where one claim + finish spends its CPU, in-process (no HTTP), on PostgreSQL.

Seeds a fresh database, then repeats what an agent does per issue, calling the same
operations the HTTP API and MCP call: authenticate the key, ``next_issue``,
authenticate again, ``save_issue status=done`` with the claim token. Prints the CPU
time (process time, so other load on the machine matters less than for wall time) of
each step, the SQL statements each step sends, and optionally a cProfile of the loop.

    .venv/bin/python -m bench.profile_claim [--loops 200] [--cprofile 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.common import PY, ROOT, new_instance, print_header, seed


def measure_main(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--key", required=True)
    p.add_argument("--loops", type=int, default=200)
    p.add_argument("--cprofile", type=int, default=0)
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

    def one():
        actor = timed("auth", lambda: agent_key_authenticate(o.key))
        got = timed("next_issue", lambda: ops.next_issue(actor))
        actor = timed("auth", lambda: agent_key_authenticate(o.key))
        timed(
            "done",
            lambda: ops.save_issue(actor, identifier=got["issue"]["identifier"], status="done", claimToken=got["claimToken"]),
        )

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
    cpu = dict.fromkeys(cpu, 0.0)
    t0 = time.perf_counter()
    for _ in range(o.loops):
        one()
    wall = time.perf_counter() - t0
    out = {
        "loops": o.loops,
        "cpu_ms": {k: round(1000 * v / o.loops, 2) for k, v in cpu.items()},
        "cpu_ms_per_claim_and_done": round(1000 * sum(cpu.values()) / o.loops, 2),
        "wall_ms_per_claim_and_done": round(1000 * wall / o.loops, 2),
        "sql_statements": statements,
    }
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
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
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
    o = p.parse_args()
    print_header("Retasc claim profile")
    inst = new_instance("postgres")
    try:
        s = seed(inst, projects=["BENCH"], issues=max(o.issues, o.loops + o.cprofile + 10), keys=1)
        args = ["--key", s["keys"][0]["key"], "--loops", str(o.loops), "--cprofile", str(o.cprofile)]
        proc = subprocess.run(
            [PY, "-m", "bench.profile_claim", "measure", *args],
            cwd=ROOT,
            env=inst.env(),
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if proc.returncode:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            return 1
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        profile = result.pop("cprofile_tottime_top25", None)
        print(json.dumps(result, indent=1))
        if profile:
            print(profile)
    finally:
        inst.drop(remove_data_dir=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
