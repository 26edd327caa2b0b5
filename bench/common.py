"""Shared plumbing for the benchmarks and drills (not imported by the test suite).

* a fresh PostgreSQL database per run (``retasc_bench_<ts>``) or an SQLite file,
  migrated and bootstrapped with ``manage.py bootstrap --json``;
* fast seeding (``python -m bench.common seed``): issues are written with
  ``bulk_create`` through the project's own models, so titles go through the ``Sealed``
  encryption path and ranks are computed with ``apps.issues.sla``; optional blocks
  chains (``--blocked-frac 0.2 --max-chain 50``) with their effective ranks computed
  like ``apps.issues.ranking`` would; agent keys minted with
  ``apps.orgs.services.agent_key_mint``;
* one Daphne process on a free loopback port, its peak RSS from /proc;
* machine facts and the exact command, printed at the top of every report.

Everything binds to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
DAPHNE = str(Path(PY).with_name("daphne"))
PG_HOST = "127.0.0.1"
PG_USER = "postgres"


# --- facts ----------------------------------------------------------------------------


def machine_facts() -> dict:
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    facts = {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg(),
    }
    for name, cmd in (
        ("postgres", ["psql", "-h", PG_HOST, "-U", PG_USER, "-Atc", "show server_version"]),
        ("redis", ["redis-server", "--version"]),
    ):
        try:
            facts[name] = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            facts[name] = "?"
    try:
        out = subprocess.run(
            [PY, "-c", "import django,daphne,mcp,psycopg;print(django.__version__,daphne.__version__,psycopg.__version__)"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        facts.update(django=out[0], daphne=out[1], psycopg=out[2])
    except Exception:  # noqa: BLE001
        pass
    return facts


def print_header(title: str) -> dict:
    facts = machine_facts()
    print(f"# {title}")
    print(f"command: cd {ROOT} && {shlex.join(getattr(sys, 'orig_argv', sys.argv))}")
    print("machine: " + json.dumps(facts))
    sys.stdout.flush()
    return facts


# --- databases ------------------------------------------------------------------------


def pg_url(name: str, port: int = 5432) -> str:
    return f"postgres://{PG_USER}@{PG_HOST}:{port}/{name}"


def pg_admin(sql: str, port: int = 5432) -> None:
    import psycopg

    with psycopg.connect(host=PG_HOST, port=port, user=PG_USER, dbname="postgres", autocommit=True) as conn:
        conn.execute(sql)


def pg_create(prefix: str = "retasc_bench", port: int = 5432) -> str:
    name = f"{prefix}_{time.strftime('%Y%m%d_%H%M%S')}_{os.getpid()}_{random.randint(0, 9999)}"
    pg_admin(f'CREATE DATABASE "{name}"', port)
    return name


def pg_drop(name: str, port: int = 5432) -> None:
    try:
        pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', port)
    except Exception as exc:  # noqa: BLE001
        print(f"warning: could not drop {name}: {exc}", file=sys.stderr)


@dataclass
class Instance:
    """A database + data directory (master key, key store) a server and seeders share."""

    db_url: str
    data_dir: str
    pg_name: str | None = None
    pg_port: int = 5432
    org_slug: str = ""
    email: str = "owner@bench.local"

    def env(self, **extra) -> dict:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "retasc.settings.base",
            "DATABASE_URL": self.db_url,
            "RETASC_DATA_DIR": self.data_dir,
            "RETASC_PUBLIC_URL": "http://127.0.0.1:8000",
            "RETASC_API_RATE": "1000000/min",  # the throttle is not what we measure
            "RETASC_INPROCESS_JOBS": "false",  # no Celery and no in-process jobs: dispatch alone
            "RETASC_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("REDIS_URL", None)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def manage(self, *args, env: dict | None = None, check=True, timeout=900) -> str:
        proc = subprocess.run(
            [PY, "manage.py", *args], cwd=ROOT, env=env or self.env(), capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def drop(self, *, remove_data_dir: bool = False) -> None:
        if self.pg_name:
            pg_drop(self.pg_name, self.pg_port)
        if remove_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def new_instance(
    kind: str = "postgres",
    *,
    lease_ttl: int | None = None,
    pg_port: int = 5432,
    prefix: str = "BENCH",
    db_prefix: str = "retasc_bench",
    name: str | None = None,
) -> Instance:
    """A migrated, bootstrapped instance. ``name``: that PostgreSQL database, dropped and
    created afresh, instead of a new ``<db_prefix>_<timestamp>`` one."""
    data_dir = tempfile.mkdtemp(prefix=f"{db_prefix.replace('_', '-')}-")
    if kind == "postgres":
        if name:
            pg_drop(name, pg_port)
            pg_admin(f'CREATE DATABASE "{name}"', pg_port)
        else:
            name = pg_create(db_prefix, port=pg_port)
        inst = Instance(db_url=pg_url(name, pg_port), data_dir=data_dir, pg_name=name, pg_port=pg_port)
    else:
        inst = Instance(db_url=f"sqlite:///{data_dir}/bench.sqlite3", data_dir=data_dir)
    try:
        inst.manage("migrate", "--noinput", "-v0")
        args = ["bootstrap", "--org", "Bench", "--project", prefix, "--email", inst.email, "--json"]
        if lease_ttl:
            args += ["--lease-ttl", str(lease_ttl)]
        out = json.loads(inst.manage(*args))
    except BaseException:
        inst.drop(remove_data_dir=True)  # no half-made database left behind
        raise
    inst.org_slug = out.get("orgSlug") or out.get("slug") or "bench"
    return inst


def run_measure(inst: Instance, module: str, *args, timeout: int = 1800) -> dict:
    """``python -m <module> measure <args>`` in the instance's environment (a Django
    process of its own), and the JSON object its last line prints."""
    proc = subprocess.run(
        [PY, "-m", module, "measure", *args], cwd=ROOT, env=inst.env(), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode:
        raise RuntimeError(f"{module} measure failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def seed(
    inst: Instance,
    *,
    projects: list[str],
    issues: int,
    keys: int = 0,
    blocked_frac: float = 0.0,
    max_chain: int = 50,
    min_chain: int = 2,
    key_projects: list[str] | None = None,
    activity: int = 0,
) -> dict:
    """Seed ``issues`` ready issues into each project (subprocess); returns the JSON it prints."""
    args = [
        PY,
        "-m",
        "bench.common",
        "seed",
        "--projects",
        ",".join(projects),
        "--issues",
        str(issues),
        "--keys",
        str(keys),
        "--blocked-frac",
        str(blocked_frac),
        "--max-chain",
        str(max_chain),
        "--min-chain",
        str(min_chain),
        "--email",
        inst.email,
        "--activity",
        str(activity),
    ]
    if key_projects:
        args += ["--key-projects", ",".join(key_projects)]
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=inst.env(), capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"seed failed:\n{proc.stdout}\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


# --- the server -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    base: str
    log_path: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def peak_rss_mb(self) -> float | None:
        return proc_status_kb(self.pid, "VmHWM")

    def rss_mb(self) -> float | None:
        return proc_status_kb(self.pid, "VmRSS")

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def proc_status_kb(pid: int, field: str) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def start_daphne(inst: Instance, *, port: int | None = None, **extra_env) -> Server:
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    env = inst.env(RETASC_PUBLIC_URL=base, **extra_env)
    log_path = os.path.join(inst.data_dir, f"daphne-{port}.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "retasc.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(proc, base, log_path)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited with {proc.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(f"{base}/.well-known/mcp.json", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"daphne did not start:\n{server.log()}")
        time.sleep(0.1)


def percentile(values, q: float) -> float | None:
    if not values:
        return None
    vals = sorted(values)
    k = min(len(vals) - 1, max(0, int(round(q / 100 * (len(vals) - 1)))))
    return vals[k]


def ms(v) -> float | None:
    return None if v is None else round(v * 1000, 1)


# --- seeding (runs inside a Django process: python -m bench.common seed ...) -----------


def vocabulary(size: int = 5000) -> list[str]:
    """Deterministic made-up words (and some two-character CJK words) for seeded titles
    and search queries: each word lands in roughly issues * 6 / size titles."""
    rng = random.Random(7)
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    han = "数据库连接失败登录页面错误修复测试部署缓存队列权限导出导入搜索索引通知"
    words: set[str] = set()
    while len(words) < size:
        if rng.random() < 0.1:
            words.add(rng.choice(han) + rng.choice(han))
        else:
            words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _seed_main(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--projects", required=True)
    p.add_argument("--issues", type=int, required=True, help="issues per project")
    p.add_argument("--keys", type=int, default=0)
    p.add_argument("--key-projects", default="", help="projects the keys default to, round-robin")
    p.add_argument("--blocked-frac", type=float, default=0.0)
    p.add_argument("--max-chain", type=int, default=50)
    p.add_argument("--min-chain", type=int, default=2, help="= --max-chain for chains of one exact length")
    p.add_argument("--activity", type=int, default=0, help="extra receipts to append to the org chain")
    p.add_argument("--email", required=True)
    o = p.parse_args(argv)

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from apps.core import search
    from apps.issues.models import Issue, Relation, SearchTerm
    from apps.issues.sla import base_rank, dispatch_rank
    from apps.orgs.models import Membership, Project
    from apps.orgs.services import agent_key_mint, project_create

    user = get_user_model().objects.get(email__iexact=o.email)
    org = Membership.objects.filter(user=user).select_related("org").first().org
    rng = random.Random(42)
    now = timezone.now()
    words = vocabulary()
    search_key = search.search_key(str(org.pk))
    prefixes = [x for x in o.projects.split(",") if x]
    out = {"org": org.slug, "projects": {}, "keys": []}
    for prefix in prefixes:
        project = Project.objects.filter(org=org, prefix=prefix.upper()).first() or project_create(org=org, prefix=prefix)
        n = o.issues
        start = project.issue_seq
        # chain layout: 20 % of the issues blocked, in chains of 2..max_chain members
        chains: list[list[int]] = []
        if o.blocked_frac > 0:
            want_blocked, used, blocked = int(n * o.blocked_frac), 0, 0
            while blocked < want_blocked and used < n:
                length = min(rng.randint(o.min_chain, o.max_chain), want_blocked - blocked + 1, n - used)
                if length < 2:
                    break
                chains.append(list(range(used, used + length)))
                used += length
                blocked += length - 1
        prio = [rng.choice((0, 1, 2, 3, 4, 0, 3)) for _ in range(n)]
        base = [base_rank(priority=pr, status="todo", created_at=now, due_at=None, now=now)[0] for pr in prio]
        eff = list(base)
        for chain in chains:  # chain[0] blocks chain[1] blocks ... : a blocker inherits the min below it
            best = 99
            for idx in reversed(chain):
                best = min(best, base[idx])
                eff[idx] = best
        t0 = time.monotonic()
        rows = []
        for i in range(n):
            issue = Issue(
                org_id=org.pk,
                project_id=project.pk,
                number=start + i + 1,
                work=True,
                status="todo",
                priority=prio[i],
                author_id=user.pk,
                created_at=now - timezone.timedelta(microseconds=(n - i) * 10),
                updated_at=now,
                base_rank=base[i],
                effective_rank=eff[i],
                dispatch_rank=dispatch_rank(eff[i], "todo"),
                source="bench",
            )
            issue.title = f"Bench {i + 1} of {prefix}: " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 7)))
            issue.no_dependency = "benchmark seed"
            rows.append(issue)
        with transaction.atomic():
            for k in range(0, n, 5000):
                Issue.objects.bulk_create(rows[k : k + 5000])
            Project.objects.filter(pk=project.pk).update(issue_seq=start + n)
            rels = [
                Relation(org_id=org.pk, source_id=rows[a].pk, target_id=rows[b].pk, type="blocks")
                for chain in chains
                for a, b in zip(chain, chain[1:], strict=False)
            ]
            Relation.objects.bulk_create(rels, batch_size=5000)
            # the keyed search index, exactly as apps.issues.search writes it
            for k in range(0, n, 2000):
                SearchTerm.objects.bulk_create(
                    [
                        SearchTerm(org_id=org.pk, issue_id=row.pk, term=term)
                        for row in rows[k : k + 2000]
                        for term in search.hashed(search_key, search.terms(row.title))
                    ],
                    batch_size=5000,
                )
        out["projects"][project.prefix] = {
            "id": project.pk,
            "issues": n,
            "blocked": sum(len(c) - 1 for c in chains),
            "chains": len(chains),
            "longest_chain": max((len(c) for c in chains), default=0),
            "seconds": round(time.monotonic() - t0, 1),
        }
    key_projects = [x.upper() for x in o.key_projects.split(",") if x] or [prefixes[0].upper()]
    projects = {p.prefix: p for p in Project.objects.filter(org=org)}
    for k in range(o.keys):
        prefix = key_projects[k % len(key_projects)]
        key, raw = agent_key_mint(org=org, user=user, project=projects[prefix], runtime="ci", label=f"bench-{k}")
        out["keys"].append({"key": raw, "project": prefix})
    if o.activity:
        out["activity"] = _seed_activity(org, user, o.activity)
    print(json.dumps(out))


def _seed_activity(org, user, count: int) -> dict:
    """Append ``count`` receipts exactly as apps.work.writer would (sealed changes, keyed links, the head file)."""
    from django.db import transaction
    from django.utils import timezone

    from apps.core import chain
    from apps.issues.models import Activity
    from apps.orgs.models import Org

    t0 = time.monotonic()
    done = 0
    key = chain.chain_key(org.pk)
    while done < count:
        step = min(5000, count - done)
        with transaction.atomic():
            locked = Org.objects.select_for_update(no_key=True).only("activity_seq", "chain_head").get(pk=org.pk)
            seq, head, now, rows = locked.activity_seq, locked.chain_head, timezone.now(), []
            for _ in range(step):
                seq += 1
                row = Activity(
                    org_id=org.pk,
                    seq=seq,
                    issue_id=None,
                    principal_id=user.pk,
                    key_id=None,
                    runtime="system",
                    verb="bench_note",
                    created_at=now,
                    prev_hash=head,
                )
                row.changes = {"note": [None, f"bench receipt {seq}"]}
                row.hash = chain.link_hash(
                    key,
                    head,
                    chain.canonical(
                        org_id=org.pk,
                        seq=seq,
                        issue_id=None,
                        principal_id=user.pk,
                        key_id=None,
                        runtime="system",
                        verb="bench_note",
                        created_at=now,
                        changes_enc=row.changes_enc,
                    ),
                )
                head = row.hash
                rows.append(row)
            Activity.objects.bulk_create(rows)
            Org.objects.filter(pk=org.pk).update(activity_seq=seq, chain_head=head)
        chain.write_anchor(org.pk, seq, head)  # after commit, as the writer does
        done += step
    return {"entries": count, "seconds": round(time.monotonic() - t0, 1)}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "seed":
        sys.path.insert(0, str(ROOT))
        _seed_main(sys.argv[2:])
    else:
        print(json.dumps(machine_facts(), indent=2))
