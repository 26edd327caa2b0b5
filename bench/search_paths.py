"""Search, written-out statement against the ORM query it replaced, side by side.

Seeds one backlog (``bench.common seed``: titles from the deterministic vocabulary, the
keyed index written as ``apps.issues.search`` writes it), then in one process, for the
same random 1–3-word queries in alternating order, times a page of 51 matches:

* ``orm``: ``search_ranked(Issue.objects...with_people())`` ordered by hits, as
  ``list_issues(query=...)`` ran it before (the query compiled by the ORM, every match
  grouped and sorted with the six joined tables' columns);
* ``written``: ``apps.issues.selectors.search_page`` (one written-out statement: ranking
  on the index entries and order columns, the wide row joined for the page alone).

It prints p50 per path, Python function calls per search (cProfile, deterministic), and
whether both gave the same issues in the same order.

    .venv/bin/python -m bench.search_paths [--kind postgres|sqlite] [--issues 10000] [--queries 50]
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.common import ROOT, new_instance, print_header, run_measure, seed


def measure_main(argv) -> None:
    """Inside a Django process pointed at the instance."""
    p = argparse.ArgumentParser()
    p.add_argument("--key", required=True)
    p.add_argument("--queries", type=int, default=50)
    o = p.parse_args(argv)
    import cProfile
    import io
    import pstats
    import random
    import time

    import django

    django.setup()
    from django.db import connection

    from apps.issues import selectors
    from apps.issues.models import Issue
    from apps.orgs.services import agent_key_authenticate
    from bench.common import vocabulary

    actor = agent_key_authenticate(o.key)
    words, rng = vocabulary(), random.Random(11)
    queries = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 3))) for _ in range(o.queries)]
    order = ("-hits", "dispatch_rank", "created_at", "number", "pk")

    def orm(q):
        qs = Issue.objects.filter(org_id=actor.org.pk).with_people()
        return list(selectors.search_ranked(qs, actor=actor, query=q).order_by(*order)[:51])

    def written(q):
        return selectors.search_page(actor=actor, query=q, size=51)

    paths = {"orm": orm, "written": written}
    same = all([i.pk for i in orm(q)] == [i.pk for i in written(q)] for q in queries)
    lat: dict = {name: [] for name in paths}
    for n, q in enumerate(queries * 2):
        for name in sorted(paths, reverse=n % 2 == 1):  # alternate which goes first
            t0 = time.perf_counter()
            paths[name](q)
            lat[name].append(time.perf_counter() - t0)
    out = {"vendor": connection.vendor, "queries": len(queries), "same_answers": same}
    for name, fn in paths.items():
        profile = cProfile.Profile()
        profile.enable()
        for q in queries:
            fn(q)
        profile.disable()
        calls = pstats.Stats(profile, stream=io.StringIO()).total_calls
        values = sorted(lat[name])
        out[name] = {"p50_ms": round(1000 * values[len(values) // 2], 2), "calls_per_search": calls // len(queries)}
    print(json.dumps(out))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=["postgres", "sqlite"], default="postgres")
    p.add_argument("--issues", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--db-prefix", default="retasc_bench")
    o = p.parse_args()
    print_header("Retasc search paths")
    inst = new_instance(o.kind, prefix="BENCH", db_prefix=o.db_prefix)
    try:
        s = seed(inst, projects=["BENCH"], issues=o.issues, keys=1)
        result = run_measure(inst, "bench.search_paths", "--key", s["keys"][0]["key"], "--queries", str(o.queries))
        print(json.dumps({"issues": o.issues, **result}), flush=True)
    finally:
        inst.drop(remove_data_dir=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
