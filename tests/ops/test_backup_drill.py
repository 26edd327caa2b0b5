"""The backup drill (SPEC §16): back up while agents write, restore into a fresh
deployment, then the chain verifies, sealed content reads back, and an org shredded
before the backup stays unreadable.

Real parts only: a live Daphne serves the agents (HTTP, two threads claiming, finishing
and releasing), ``manage.py backup`` / ``restore`` / ``verify_chain`` run as processes,
the target is a fresh data directory and a fresh database (SQLite file, or a scratch
PostgreSQL database).
"""

from __future__ import annotations

import json
import tarfile
import threading
import time

import httpx2
import pytest

from apps.issues.models import Issue
from apps.issues.services import org_delete
from apps.orgs.models import Org
from tests.conftest import make_agent, make_org, new_issue
from tests.ops.conftest import manage, source_env, start_daphne

pytestmark = [pytest.mark.slow]

TITLES = [f"Sealed title {n}" for n in range(1, 31)]


def shred(org) -> None:
    org_delete(org=org)


class Agent(threading.Thread):
    """Claims, then finishes (every third turn) or releases, until stopped."""

    def __init__(self, base: str, key: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.http = httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.stop, self.actions, self.errors = stop, 0, []

    def run(self):
        turn = 0
        try:
            while not self.stop.is_set():
                r = self.http.post("/api/v1/work/next", json={})
                if r.status_code != 200:
                    self.errors.append((r.status_code, r.text))
                    return
                issue = r.json()["issue"]
                if issue is None:
                    time.sleep(0.05)
                    continue
                token, ident = r.json()["claimToken"], issue["identifier"]
                if turn % 3 == 0:
                    r = self.http.patch(f"/api/v1/issues/{ident}", json={"status": "done", "claimToken": token})
                else:
                    r = self.http.post(f"/api/v1/issues/{ident}/release", json={"claimToken": token, "note": "later"})
                if r.status_code != 200:
                    self.errors.append((r.status_code, r.text))
                    return
                turn += 1
                self.actions += 1
        finally:
            self.http.close()


def test_backup_while_agents_write_then_restore_into_a_fresh_deployment(tworld, target, tmp_path):
    # Given: work in ACME, and an org that was deleted (crypto-shredded) before the backup.
    for title in TITLES:
        new_issue(tworld.a, title)
    doomed, doomed_project, doomed_owner = make_org("Doomed", "DOOM", "owner@doomed.test")
    doomed_issue = new_issue(make_agent(doomed, doomed_owner, doomed_project).actor, "Shredded secret")
    doomed_ref = str(doomed.pk)
    shred(doomed)
    assert not Org.objects.filter(pk=doomed_ref).exists()

    # When: two agents work through a live server while the backup runs.
    server = start_daphne(tmp_path)
    stop = threading.Event()
    agents = [Agent(server.base, tworld.owner_agent.raw, stop), Agent(server.base, tworld.member_agent.raw, stop)]
    try:
        for agent in agents:
            agent.start()
        deadline = time.monotonic() + 60
        while sum(a.actions for a in agents) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        archive = tmp_path / "retasc-backup.tar.gz"
        before = sum(a.actions for a in agents)
        done = manage(source_env(), "backup", "--out", str(archive), "--json")
        during = sum(a.actions for a in agents) - before
    finally:
        stop.set()
        for agent in agents:
            agent.join(30)
        server.stop()
    assert done.returncode == 0, done.stderr
    assert [a.errors for a in agents] == [[], []]
    assert before >= 4 and during > 0  # the agents kept writing while the backup ran
    summary = json.loads(done.stdout)
    assert summary["ok"] is True and summary["keys"] >= 2  # ACME and Globex; not the shredded org

    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())
        heads = json.loads(tar.extractfile("chain_heads.json").read())
    assert names[0] == "manifest.json"
    assert f"keys/{doomed_ref}.key" not in names and "keys/canary" in names
    assert set(manifest["members"]) == set(names) - {"manifest.json"}
    assert manifest["database"]["engine"] == ("postgresql" if "postgres" in target.database_url else "sqlite")
    assert "issues.0001_initial" in manifest["migrations"] and manifest["retasc"] and manifest["django"].startswith("5.2")
    assert str(tworld.org.pk) in {h["org"] for h in heads} and doomed_ref not in {h["org"] for h in heads}

    # Then: the restore into a fresh deployment verifies and reads back.
    restored = manage(target.env(), "restore", str(archive))
    assert restored.returncode == 0, restored.stderr
    assert "restored" in restored.stdout
    verified = manage(target.env(), "verify_chain")
    assert (verified.returncode, verified.stdout.strip()) == (0, f"chain intact ({len(heads)} org(s))"), verified.stderr

    server = start_daphne(tmp_path, DATABASE_URL=target.database_url, RETASC_DATA_DIR=str(target.data_dir))
    try:
        with httpx2.Client(base_url=server.base, headers={"Authorization": f"Bearer {tworld.owner_agent.raw}"}) as http:
            r = http.get("/api/v1/issues/ACME-1")
            assert (r.status_code, r.json()["title"]) == (200, TITLES[0])
            r = http.get("/api/v1/issues/ACME-1/activity")
            assert r.status_code == 200 and r.json()["activity"]
    finally:
        server.stop()

    # The shredded org stays unreadable: no row, no key, and its old ciphertext opens with nothing.
    probe = manage(
        target.env(),
        "shell",
        "-v",
        "0",
        "-c",
        "from apps.core import keystore, crypto\n"
        "from apps.orgs.models import Org\n"
        f"print(Org.objects.filter(pk='{doomed_ref}').exists())\n"
        "try:\n"
        f"    keystore.data_key('{doomed_ref}'); print('readable')\n"
        "except crypto.IntegrityError:\n"
        "    print('shredded')\n",
    )
    assert probe.stdout.split() == ["False", "shredded"], probe.stderr
    assert f"{doomed_ref}.key" not in target.key_files()
    assert not Issue.objects.filter(pk=doomed_issue.pk).exists()


def test_backup_never_overwrites_an_archive(tworld, tmp_path):
    archive = tmp_path / "taken.tar.gz"
    archive.write_bytes(b"an earlier backup")
    done = manage(source_env(), "backup", "--out", str(archive))
    assert (done.returncode, done.stderr.strip()) == (1, "taken.tar.gz already exists; choose a new file name.")
    assert archive.read_bytes() == b"an earlier backup"
