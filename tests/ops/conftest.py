"""Deployments for the backup drills: the test deployment (source) and a fresh target.

- ``source_env()``: the environment of this test run's deployment (its test database,
  data directory and master key), for ``manage.py`` subprocesses.
- ``target``: a fresh deployment: an empty data directory and a database that does not
  exist yet (SQLite: a file path; PostgreSQL: a scratch database ``retasc_ops_*`` on the
  test server, created empty and dropped afterwards).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.conf import settings

from tests.live import ROOT, start_daphne, test_database_url  # noqa: F401  (re-exported)


def source_env(**extra) -> dict:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "retasc.settings.test",
        "DATABASE_URL": test_database_url(),
        "RETASC_DATA_DIR": str(settings.DATA_DIR),
        "RETASC_MASTER_KEY": settings.RETASC_MASTER_KEY,
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "RETASC_INPROCESS_JOBS": "false",
        **extra,
    }


def manage(env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    # The start-up's own warnings when it tightens a directory the test made (0755 -> 0700;
    # apps.core.datadir) are not what these tests read: drop those lines, keep the rest.
    done.stderr = "".join(line for line in done.stderr.splitlines(keepends=True) if "retasc.datadir" not in line)
    return done


@dataclass
class Target:
    database_url: str
    data_dir: Path

    def env(self, **extra) -> dict:
        return source_env(DATABASE_URL=self.database_url, RETASC_DATA_DIR=str(self.data_dir), **extra)

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    def key_files(self) -> dict[str, bytes]:
        if not self.keys_dir.exists():
            return {}
        return {p.name: p.read_bytes() for p in sorted(self.keys_dir.glob("*.key"))}

    def sqlite_path(self) -> Path:
        return Path(self.database_url.removeprefix("sqlite:///"))

    def tables(self) -> list[str]:
        """The target database's tables (none while it is fresh)."""
        if self.database_url.startswith("sqlite"):
            if not self.sqlite_path().exists():
                return []
            with sqlite3.connect(self.sqlite_path()) as conn:
                return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        with psycopg.connect(self.database_url.replace("postgres://", "postgresql://", 1)) as conn:
            rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
        return [r[0] for r in rows]


def _admin_url(name: str) -> str:
    parts = urlsplit(test_database_url().replace("postgres://", "postgresql://", 1))
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture
def target(django_db_setup, tmp_path):
    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        yield Target(f"sqlite:///{tmp_path / 'target' / 'retasc.sqlite3'}", tmp_path / "target")
        return
    name = f"retasc_ops_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_admin_url("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Target(_admin_url(name).replace("postgresql://", "postgres://", 1), tmp_path / "target")
    finally:
        with psycopg.connect(_admin_url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
