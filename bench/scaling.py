"""How dispatch and the heavy jobs scale with the backlog (in-process, services, PostgreSQL).

For each backlog size (default 1k, 10k, 100k issues in one project; 20 % blocked in
``blocks`` chains up to 50 deep): the p50/p95 of ``next_issue`` (the service, as the
API and MCP call it), each pull followed by ``release_issue`` so the backlog stays the
same size (only ``next_issue`` is timed). Then, on the largest database:

* one priority change at the far end of a 1,000-deep blocks chain (the effective rank
  propagates to all 999 blockers; ``issue_update`` timed end to end, refresh included);
* ``verify_chain`` over N appended receipts (time per 100k entries);
* the org export (JSON, streamed to nowhere), on the 10k database: time per 10k issues.

    .venv/bin/python -m bench.scaling [--sizes 1000,10000,100000] [--receipts 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

from bench.common import ROOT, new_instance, print_header, run_measure, seed, vocabulary


def measure_main(argv) -> None:
    """Inside a Django process pointed at the instance (python -m bench.scaling measure ...)."""
    p = argparse.ArgumentParser()
    p.add_argument("--key", required=True)
    p.add_argument("--pulls", type=int, default=200)
    p.add_argument("--chain-project", default="")
    p.add_argument("--receipts", type=int, default=0)
    p.add_argument("--export", action="store_true")
    p.add_argument("--searches", type=int, default=0)
    o = p.parse_args(argv)
    import django

    django.setup()
    from apps.leases import services as leases
    from apps.orgs.services import agent_key_authenticate

    out: dict = {}
    actor = agent_key_authenticate(o.key)
    lat = []
    for _ in range(o.pulls):
        t0 = time.perf_counter()
        got = leases.next_issue(actor=actor)
        lat.append(time.perf_counter() - t0)
        leases.release_issue(actor=actor, identifier=got["issue"]["identifier"], claim_token=got["claimToken"])
    lat.sort()
    out["next_issue"] = {
        "pulls": len(lat),
        "p50_ms": round(1000 * lat[len(lat) // 2], 2),
        "p95_ms": round(1000 * lat[int(len(lat) * 0.95)], 2),
        "mean_ms": round(1000 * statistics.mean(lat), 2),
    }
    if o.searches:
        from apps.tools import operations

        plain = []
        for _ in range(max(20, o.searches // 4)):  # the same answer without a query: 50 shaped issues
            t0 = time.perf_counter()
            operations.list_issues(actor)
            plain.append(time.perf_counter() - t0)
        plain.sort()
        rng, words, lat, hits = random.Random(11), vocabulary(), [], []
        for _ in range(o.searches):
            query = " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
            t0 = time.perf_counter()
            answer = operations.list_issues(actor, query=query)  # as MCP and the API call it: 50 shaped
            lat.append(time.perf_counter() - t0)
            hits.append(len(answer["issues"]))
        lat.sort()
        out["search"] = {
            "queries": len(lat),
            "p50_ms": round(1000 * lat[len(lat) // 2], 2),
            "p95_ms": round(1000 * lat[int(len(lat) * 0.95)], 2),
            "mean_results": round(statistics.mean(hits), 1),
            "list_without_query_p50_ms": round(1000 * plain[len(plain) // 2], 2),
        }
    if o.chain_project:
        from apps.issues.models import Issue
        from apps.issues.services import issue_update
        from apps.orgs.models import Project

        project = Project.objects.get(org=actor.org, prefix=o.chain_project)
        far = Issue.objects.filter(project=project).order_by("-number").first()
        head = Issue.objects.filter(project=project).order_by("number").first()
        times = []
        for k in range(6):
            prio = 1 if k % 2 == 0 else 4
            t0 = time.perf_counter()
            issue_update(actor=actor, identifier=far.identifier, priority=prio)
            times.append(time.perf_counter() - t0)
            head.refresh_from_db()
            assert head.effective_rank == (1 if prio == 1 else min(head.base_rank, head.effective_rank)) or prio != 1
        out["far_end_priority_change"] = {
            "chain_depth": Issue.objects.filter(project=project).count(),
            "median_ms": round(1000 * statistics.median(times), 1),
            "max_ms": round(1000 * max(times), 1),
            "head_rank_after_urgent": "propagated" if times else None,
        }
    if o.receipts:
        from apps.issues.chain import verify_org
        from apps.issues.models import Activity

        n = Activity.objects.filter(org=actor.org).count()
        t0 = time.perf_counter()
        problem = verify_org(actor.org)
        s = time.perf_counter() - t0
        out["verify_chain"] = {
            "entries": n,
            "seconds": round(s, 2),
            "per_100k_s": round(s * 100_000 / n, 2),
            "ok": problem is None,
        }
    if o.export:
        from apps.intake.services import org_export
        from apps.issues.models import Issue
        from apps.orgs.actor import Actor
        from apps.orgs.models import Membership

        owner = Membership.objects.get(org=actor.org, role="owner")
        owner_actor = Actor(org=actor.org, principal_id=owner.user_id, key=None, runtime="dash", membership=owner)
        n = Issue.objects.filter(org=actor.org).count()
        t0 = time.perf_counter()
        size = sum(len(c) for c in org_export(actor=owner_actor, format="json").chunks)
        s = time.perf_counter() - t0
        out["export_json"] = {"issues": n, "bytes": size, "seconds": round(s, 2), "per_10k_s": round(s * 10_000 / n, 2)}
    print(json.dumps(out))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--pulls", type=int, default=200)
    p.add_argument("--chain-depth", type=int, default=1000)
    p.add_argument("--receipts", type=int, default=100_000)
    p.add_argument("--searches", type=int, default=200)
    p.add_argument("--json-out", default="")
    p.add_argument("--db-prefix", default="retasc_bench", help="name prefix of the PostgreSQL databases it creates")
    o = p.parse_args()
    facts = print_header("Retasc scaling")
    sizes = [int(x) for x in o.sizes.split(",")]
    report = {"machine": facts, "sizes": {}}
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        inst = new_instance("postgres", prefix="BENCH", db_prefix=o.db_prefix)
        try:
            s = seed(inst, projects=["BENCH"], issues=size, keys=1, blocked_frac=0.2, max_chain=50)
            row = {"seed": s["projects"]["BENCH"], "seed_seconds": s["seconds"]}
            extra = ["--pulls", str(o.pulls), "--searches", str(o.searches)]
            if last:
                c = seed(
                    inst,
                    projects=["CHAIN"],
                    issues=o.chain_depth,
                    keys=0,
                    blocked_frac=1.0,
                    max_chain=o.chain_depth,
                    min_chain=o.chain_depth,  # one chain, exactly chain_depth deep
                    activity=o.receipts,
                )
                row["chain_seed"] = c["projects"]["CHAIN"]
                row["receipts_seeded"] = c.get("activity")
                extra += ["--chain-project", "CHAIN", "--receipts", str(o.receipts)]
            if size == 10_000:  # export time per 10k issues, measured at 10k
                extra += ["--export"]
            row.update(run_measure(inst, "bench.scaling", "--key", s["keys"][0]["key"], *extra))
            report["sizes"][size] = row
            print(json.dumps({"size": size, **row}), flush=True)
        finally:
            inst.drop()
    p50 = {k: v["next_issue"]["p50_ms"] for k, v in report["sizes"].items()}
    lo, hi = min(p50), max(p50)
    growth = round(p50[hi] / p50[lo], 2)
    report["growth_p50"] = {"from": lo, "to": hi, "x": growth, "target": 1.5, "met": growth <= 1.5}
    far = report["sizes"][hi].get("far_end_priority_change", {})
    report["far_end"] = {"median_ms": far.get("median_ms"), "target_ms": 200, "met": (far.get("median_ms") or 1e9) < 200}
    searched = {k: v["search"]["p50_ms"] for k, v in report["sizes"].items() if "search" in v and k >= 10_000}
    report["search_p50"] = {"ms": searched, "target_ms": 50, "met": all(v < 50 for v in searched.values())}
    verdict = {"growth_p50": report["growth_p50"], "far_end": report["far_end"], "search_p50": report["search_p50"]}
    print("verdict: " + json.dumps(verdict), flush=True)
    if o.json_out:
        os.makedirs(os.path.dirname(o.json_out) or ".", exist_ok=True)
        with open(o.json_out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
