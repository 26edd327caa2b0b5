"""What the Dash's chain check costs at a large chain: the whole walk (``verify_chain``,
and every issue page before the incremental check) against the incremental check the
issue page now does (from the last verified head, SPEC §12).

Seeds a fresh PostgreSQL database with ``--activity`` receipts (keyed links and the head
file, as the writer writes them), then times, in one process: a whole walk; the first
cached check (a whole walk that fills the cache); the next check with nothing new; and a
check after a few more receipts.

    .venv/bin/python -m bench.chain_check [--activity 50000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import ROOT, new_instance, print_header, run_measure, seed


def measure_main(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--org", required=True)
    p.add_argument("--repeat", type=int, default=5)
    o = p.parse_args(argv)
    import django

    django.setup()
    from apps.issues.chain import check_org, check_org_cached, forget_verified
    from apps.issues.services import label_save
    from apps.orgs.actor import Actor
    from apps.orgs.models import Org

    org = Org.objects.get(slug=o.org)

    def timed(fn):
        t0 = time.perf_counter()
        result = fn()
        return round(1000 * (time.perf_counter() - t0), 1), result

    whole = [timed(lambda: check_org(org)) for _ in range(2)]
    forget_verified()
    first = timed(lambda: check_org_cached(org))
    nothing_new = [timed(lambda: check_org_cached(org)) for _ in range(o.repeat)]
    for n in range(3):
        label_save(actor=Actor.system(org), name=f"bench-{n}")
    three_new = timed(lambda: check_org_cached(org))
    print(
        json.dumps(
            {
                "receipts": Org.objects.get(pk=org.pk).activity_seq,
                "whole_walk_ms": [w[0] for w in whole],
                "whole_walk_broken": [str(w[1].broken) if w[1].broken else None for w in whole],
                "cached_first_ms": first[0],
                "cached_nothing_new_ms": [r[0] for r in nothing_new],
                "cached_nothing_new_walked": nothing_new[-1][1].walked,
                "cached_three_new_ms": three_new[0],
                "cached_three_new_walked": three_new[1].walked,
            }
        )
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--activity", type=int, default=50000)
    o = p.parse_args()
    print_header("Retasc chain check")
    inst = new_instance("postgres")
    try:
        seed(inst, projects=["BENCH"], issues=10, activity=o.activity)
        print(json.dumps(run_measure(inst, "bench.chain_check", "--org", inst.org_slug), indent=1))
    finally:
        inst.drop(remove_data_dir=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
