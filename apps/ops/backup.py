"""Backup and restore of one deployment: one tar archive (SPEC §16).

Members:

- ``database.sqlite3`` (SQLite, the online backup API: a consistent copy while agents
  write) or ``database.pgdump`` (PostgreSQL, ``pg_dump`` custom format);
- ``keys/canary`` and ``keys/<org id>.key``: the key store, data keys still wrapped by
  the master key. The master key is *not* in the archive: keep it apart;
- ``chain_heads.json``: per org, ``activity_seq`` and ``chain_head`` as in the dump;
- ``manifest.json``: versions (Retasc, Django, database engine and server, applied
  migrations) and the SHA-256 and size of every other member.

Order and consistency. The database is dumped first and the key store copied after: an
org in the dump had its key stored before its row committed, so its key is in the copy;
an org deleted between the two keeps its rows in the dump but loses its key (it stays
shredded). The chain heads are read from the same snapshot as the dump (SQLite: from
the copy; PostgreSQL: ``pg_dump --snapshot`` of a REPEATABLE READ transaction that also
reads the heads).

Restore writes only into an empty deployment and checks everything it can first: the
archive's members and checksums, the engine, that this master key opens every wrapped
key, that the key store holds no data key and the database no org or user (a database
with no tables, or one migrated to exactly the archive's migrations and never used).
A refusal is one sentence (``RestoreRefused``) and writes nothing. After writing, the
restored chain heads are compared with ``chain_heads.json``.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import django
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from apps.core import crypto, keystore
from apps.orgs.models import Org

FORMAT = "retasc-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HEADS = "chain_heads.json"
DB_MEMBER = {"sqlite": "database.sqlite3", "postgresql": "database.pgdump"}
KEYS = "keys/"
_KEY_NAME = re.compile(r"(canary|chain\.secret|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.key)")
_CHUNK = 1 << 20


class BackupError(Exception):
    """A backup or restore that failed or was refused; the message is one sentence."""


class RestoreRefused(BackupError):
    """Restore refused before anything was written."""


# --- shared ----------------------------------------------------------------------------


def engine() -> str:
    return "postgresql" if connection.vendor == "postgresql" else "sqlite"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def pg_tool(name: str) -> str:
    """``pg_dump`` / ``pg_restore`` from PATH, else the newest under /usr/lib/postgresql."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return candidates[-1]
    raise BackupError(f"{name} was not found; install the PostgreSQL client tools (version 15 or newer).")


def _pg_env() -> dict:
    """libpq variables for pg_dump / pg_restore: the password never goes on a command line."""
    db = connection.settings_dict
    env = {**os.environ, "PGDATABASE": db["NAME"]}
    for key, var in (("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER"), ("PASSWORD", "PGPASSWORD")):
        if db.get(key):
            env[var] = str(db[key])
    for option in ("sslmode", "sslrootcert", "sslcert", "sslkey"):
        if db.get("OPTIONS", {}).get(option):
            env[f"PG{option.upper()}"] = str(db["OPTIONS"][option])
    return env


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, env=_pg_env(), capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackupError(f"{what} failed: {detail}")


def _rows(cur, sql: str) -> list:
    cur.execute(sql)
    return cur.fetchall()


def _read_state(cur) -> tuple[list[dict], list[str]]:
    """(chain heads, applied migrations) through a DB-API cursor on the dumped snapshot."""
    org_t = Org._meta.db_table
    heads = [
        {"org": str(org_id), "slug": slug, "activitySeq": int(seq), "chainHead": head}
        for org_id, slug, seq, head in _rows(cur, f"SELECT id, slug, activity_seq, chain_head FROM {org_t} ORDER BY id")
    ]
    migrations = [f"{app}.{name}" for app, name in _rows(cur, "SELECT app, name FROM django_migrations ORDER BY app, name")]
    return heads, migrations


def _normal_uuid(value: str) -> str:
    # SQLite stores UUIDs as 32 hex digits; PostgreSQL as the dashed form.
    return str(uuid.UUID(str(value)))


# --- backup ----------------------------------------------------------------------------


def backup(out: Path) -> dict:
    """Write the archive to ``out`` (created, never overwritten); return the manifest."""
    if out.exists():
        raise BackupError(f"{out.name} already exists; choose a new file name.")
    if not out.parent.is_dir():
        raise BackupError(f"{out.parent} is not a directory; create it first.")
    # Staged beside the archive (the operator chose room for it there), readable by its owner only.
    with tempfile.TemporaryDirectory(prefix=".retasc-backup-", dir=out.parent) as tmp:
        work = Path(tmp)
        db_member = DB_MEMBER[engine()]
        if engine() == "sqlite":
            heads, migrations, version = _dump_sqlite(work / db_member)
        else:
            heads, migrations, version = _dump_postgres(work / db_member)
        (work / "keys").mkdir()
        key_names = keystore.export_files(work / "keys")
        for head in heads:
            head["org"] = _normal_uuid(head["org"])
        (work / HEADS).write_text(json.dumps(heads, indent=1, sort_keys=True))
        members = [db_member, HEADS, *(KEYS + name for name in key_names)]
        manifest = {
            "format": FORMAT,
            "formatVersion": FORMAT_VERSION,
            "createdAt": datetime.now(UTC).isoformat(timespec="seconds"),
            "retasc": settings.VERSION,
            "django": django.get_version(),
            "database": {"engine": engine(), "version": version},
            "migrations": migrations,
            "orgs": len(heads),
            "members": {name: {"sha256": _sha256(work / name), "bytes": (work / name).stat().st_size} for name in members},
        }
        partial = out.with_name(out.name + ".partial")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # wrapped keys inside: owner only
        except OSError as exc:
            raise BackupError(f"{out} cannot be written ({exc.strerror}).") from None
        try:
            with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
                data = json.dumps(manifest, indent=1, sort_keys=True).encode()
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mode, info.mtime = len(data), 0o600, int(datetime.now(UTC).timestamp())
                tar.addfile(info, io.BytesIO(data))
                for name in members:
                    tar.add(work / name, arcname=name, recursive=False)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
    return manifest


def _dump_sqlite(dest: Path) -> tuple[list, list, str]:
    source = sqlite3.connect(connection.settings_dict["NAME"], timeout=30)
    copy = sqlite3.connect(dest)
    try:
        source.backup(copy)  # one step: a consistent copy, writers go on (WAL)
        heads, migrations = _read_state(copy.cursor())
    finally:
        copy.close()
        source.close()
    return heads, migrations, sqlite3.sqlite_version


def _dump_postgres(dest: Path) -> tuple[list, list, str]:
    tool = pg_tool("pg_dump")
    with transaction.atomic(), connection.cursor() as cur:
        # The first statement of the transaction: its snapshot is what pg_dump dumps.
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute("SELECT pg_export_snapshot(), current_setting('server_version')")
        snapshot, version = cur.fetchone()
        heads, migrations = _read_state(cur)
        # The exporting transaction stays open while pg_dump reads its snapshot.
        _run([tool, "--format=custom", f"--snapshot={snapshot}", f"--file={dest}"], "pg_dump")
    return heads, migrations, version


# --- restore ---------------------------------------------------------------------------


def restore(archive: Path) -> dict:
    """Restore ``archive`` into this (empty) deployment; return a summary."""
    with tempfile.TemporaryDirectory(prefix="retasc-restore-") as tmp:
        work = Path(tmp)
        manifest = _unpack(archive, work)
        db_member = DB_MEMBER[engine()]
        if manifest["database"]["engine"] != engine():
            raise RestoreRefused(
                f"The archive holds a {manifest['database']['engine']} database and this deployment uses {engine()}; "
                "restore it into the same kind of database."
            )
        keys = {path.name: path.read_bytes() for path in sorted((work / "keys").glob("*"))}
        _check_keys_open(keys)
        migrated = _check_database_empty(manifest["migrations"])
        if keystore.has_data_keys():
            raise RestoreRefused("The key store already holds org keys; restore goes only into an empty deployment.")
        tool = pg_tool("pg_restore") if engine() == "postgresql" else ""
        # Everything checked: write the database, then the keys.
        if engine() == "sqlite":
            _load_sqlite(work / db_member)
        else:
            _load_postgres(tool, work / db_member, clean=migrated)
        keystore.import_files(keys)
        expected = json.loads((work / HEADS).read_text())
    _check_heads(expected)
    return {"orgs": len(expected), "keys": len(keys) - (1 if keystore.CANARY in keys else 0), "manifest": manifest}


def _unpack(archive: Path, work: Path) -> dict:
    """Extract the known members into ``work``, checking every checksum; return the manifest."""
    try:
        tar = tarfile.open(archive, mode="r:*")
    except (OSError, tarfile.TarError):
        raise RestoreRefused(f"{archive.name} is not a readable backup archive.") from None
    (work / "keys").mkdir()
    seen: dict[str, str] = {}
    manifest = None
    with tar:
        try:
            for member in tar:
                name = member.name
                known = name in (MANIFEST, HEADS, *DB_MEMBER.values()) or (
                    name.startswith(KEYS) and _KEY_NAME.fullmatch(name[len(KEYS) :])
                )
                if not member.isfile() or not known or name in seen:
                    raise RestoreRefused(f"The archive holds an unexpected member {name!r}; it is not a Retasc backup.")
                source = tar.extractfile(member)
                digest = hashlib.sha256()
                with open(work / name, "wb") as handle:
                    for chunk in iter(lambda src=source: src.read(_CHUNK), b""):
                        digest.update(chunk)
                        handle.write(chunk)
                seen[name] = digest.hexdigest()
        except (OSError, tarfile.TarError, EOFError):
            raise RestoreRefused(f"{archive.name} is truncated or damaged.") from None
    if MANIFEST not in seen:
        raise RestoreRefused("The archive has no manifest; it is not a Retasc backup.")
    try:
        manifest = json.loads((work / MANIFEST).read_text())
        listed = manifest["members"]
        ok = manifest["format"] == FORMAT
    except (ValueError, KeyError, TypeError):
        raise RestoreRefused("The archive's manifest is not readable; it is not a Retasc backup.") from None
    if not ok or manifest.get("formatVersion") != FORMAT_VERSION:
        raise RestoreRefused("The archive is not a Retasc backup of a format this version reads.")
    del seen[MANIFEST]
    if set(listed) != set(seen):
        missing = sorted(set(listed) ^ set(seen))[0]
        raise RestoreRefused(f"The archive's member {missing!r} does not match its manifest; the archive is damaged.")
    for name, digest in seen.items():
        if listed[name].get("sha256") != digest:
            raise RestoreRefused(f"The checksum of {name!r} does not match the manifest; the archive is damaged.")
    archived_engine = manifest.get("database", {}).get("engine")
    if archived_engine not in DB_MEMBER or DB_MEMBER[archived_engine] not in seen or HEADS not in seen:
        raise RestoreRefused("The archive lacks its database dump or its chain heads; it is damaged.")
    return manifest


def _check_keys_open(keys: dict[str, bytes]) -> None:
    for name, wrapped in keys.items():
        try:
            keystore.check_openable(name, wrapped)
        except (crypto.CryptoConfigError, crypto.IntegrityError):
            raise RestoreRefused(
                "RETASC_MASTER_KEY does not open the archive's keys; set the master key the backup was taken under."
            ) from None


def _check_database_empty(archived_migrations: list[str]) -> bool:
    """Refuse unless the database is empty. True when it is migrated (but never used)."""
    if engine() == "sqlite" and not Path(connection.settings_dict["NAME"]).exists():
        return False
    with connection.cursor() as cur:
        tables = set(connection.introspection.table_names(cur))
        if not tables:
            return False
        if "django_migrations" not in tables:
            raise RestoreRefused("The database holds tables that are not Retasc's; restore into an empty database.")
        counts = {}
        for label, table in (("org", Org._meta.db_table), ("user", get_user_model()._meta.db_table)):
            if table in tables:
                cur.execute(f"SELECT COUNT(*) FROM {table}")
                counts[label] = cur.fetchone()[0]
        if any(counts.values()):
            held = ", ".join(f"{n} {label}(s)" for label, n in counts.items() if n)
            raise RestoreRefused(f"The database already holds data ({held}); restore goes only into an empty deployment.")
        applied = sorted(f"{app}.{name}" for app, name in _rows(cur, "SELECT app, name FROM django_migrations"))
    if applied != sorted(archived_migrations):
        raise RestoreRefused("The database is migrated differently from the archive; restore into a database with no tables.")
    return True


def _load_sqlite(dump: Path) -> None:
    connection.close()
    source = sqlite3.connect(dump)
    target = sqlite3.connect(connection.settings_dict["NAME"], timeout=30)
    try:
        source.backup(target)  # replaces the target's pages in one transaction
    finally:
        target.close()
        source.close()


def _load_postgres(tool: str, dump: Path, *, clean: bool) -> None:
    connection.close()
    args = [tool, "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error"]
    if clean:  # migrated but empty: its (empty) tables are replaced
        args += ["--clean", "--if-exists"]
    _run([*args, f"--dbname={connection.settings_dict['NAME']}", str(dump)], "pg_restore")


def _check_heads(expected: list[dict]) -> None:
    with connection.cursor() as cur:
        heads, _ = _read_state(cur)
    restored = {_normal_uuid(h["org"]): (h["activitySeq"], h["chainHead"]) for h in heads}
    for head in expected:
        if restored.get(head["org"]) != (head["activitySeq"], head["chainHead"]):
            raise BackupError(
                f"The restored chain head of org {head['slug']} differs from the archive's; run verify_chain before using it."
            )
