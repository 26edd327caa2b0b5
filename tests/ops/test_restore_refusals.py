"""Restore refuses anything but an intact archive into an empty deployment, with one
sentence and exit code 1, and writes nothing when it refuses."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from apps.core import keystore
from apps.ops.backup import DB_MEMBER, backup, engine
from apps.orgs.models import Org
from tests.conftest import new_issue
from tests.ops.conftest import manage

pytestmark = [pytest.mark.slow]


@pytest.fixture
def archive(tworld, tmp_path) -> Path:
    new_issue(tworld.a, "Kept secret")
    path = tmp_path / "backup.tar.gz"
    backup(path)
    return path


def members_of(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def write_archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def keys_in_store() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(keystore.keystore_dir().glob("*.key"))}


def test_restore_refuses_a_deployment_that_holds_data(archive, unchanged, capsys):
    keys = keys_in_store()
    counts = (Org.objects.count(), get_user_model().objects.count())
    with unchanged(), pytest.raises(SystemExit) as exit_:
        call_command("restore", str(archive))
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip() == (
        f"The database already holds data ({counts[0]} org(s), {counts[1]} user(s)); restore goes only into an empty deployment."
    )
    assert keys_in_store() == keys
    assert (Org.objects.count(), get_user_model().objects.count()) == counts


def _damage(kind: str, members: dict[str, bytes]) -> tuple[dict[str, bytes], str]:
    db = DB_MEMBER[engine()]
    key = next(name for name in members if name.endswith(".key"))
    if kind == "database":
        members[db] = flip_last_byte(members[db])
        return members, f"The checksum of {db!r} does not match the manifest; the archive is damaged."
    if kind == "key":
        members[key] = flip_last_byte(members[key])
        return members, f"The checksum of {key!r} does not match the manifest; the archive is damaged."
    if kind == "missing":
        del members[key]
        return members, f"The archive's member {key!r} does not match its manifest; the archive is damaged."
    if kind == "extra":
        members["../escape"] = b"x"
        return members, "The archive holds an unexpected member '../escape'; it is not a Retasc backup."
    if kind == "engine":
        other = "sqlite" if engine() == "postgresql" else "postgresql"
        manifest = json.loads(members.pop("manifest.json"))
        manifest["database"]["engine"] = other
        manifest["members"][DB_MEMBER[other]] = manifest["members"].pop(db)
        members = {"manifest.json": json.dumps(manifest).encode(), DB_MEMBER[other]: members.pop(db), **members}
        return members, (
            f"The archive holds a {other} database and this deployment uses {engine()}; restore it into the same kind of database."
        )
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["database", "key", "missing", "extra", "engine"])
def test_restore_checks_the_archive_before_writing_anything(archive, tmp_path, kind, unchanged, capsys):
    # In this (non-empty) deployment: the archive is checked before the deployment is.
    members, sentence = _damage(kind, members_of(archive))
    damaged = write_archive(tmp_path / "damaged.tar.gz", members)
    keys = keys_in_store()
    with unchanged(), pytest.raises(SystemExit) as exit_:
        call_command("restore", str(damaged))
    assert (exit_.value.code, capsys.readouterr().err.strip()) == (1, sentence)
    assert keys_in_store() == keys


def test_restore_refuses_a_truncated_archive_in_a_fresh_deployment(archive, target, tmp_path):
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    done = manage(target.env(), "restore", str(cut))
    assert (done.returncode, done.stderr.strip()) == (1, "cut.tar.gz is truncated or damaged.")
    assert (target.tables(), target.key_files()) == ([], {})


def test_restore_refuses_a_key_store_that_holds_keys(archive, target):
    target.keys_dir.mkdir(parents=True)
    stray = target.keys_dir / "00000000-0000-0000-0000-000000000001.key"
    stray.write_bytes(b"a key of another deployment")
    done = manage(target.env(), "restore", str(archive))
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "The key store already holds org keys; restore goes only into an empty deployment.",
    )
    assert (target.tables(), target.key_files()) == ([], {stray.name: b"a key of another deployment"})


def test_restore_refuses_another_master_key(archive, target):
    other = base64.b64encode(b"another-master-key-32-bytes-long").decode()
    done = manage(target.env(RETASC_MASTER_KEY=other), "restore", str(archive))
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "RETASC_MASTER_KEY does not open the archive's keys; set the master key the backup was taken under.",
    )
    assert (target.tables(), target.key_files()) == ([], {})


def test_restore_into_a_migrated_never_used_database(archive, target):
    assert manage(target.env(), "migrate", "-v0").returncode == 0
    done = manage(target.env(), "restore", str(archive), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    verified = manage(target.env(), "verify_chain", "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"] is True
