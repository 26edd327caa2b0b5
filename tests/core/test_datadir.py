"""The data directory is 0700 and the SQLite database with its WAL/SHM files 0600, also
when they already existed with looser modes; a looser mode is a start-up warning.
(On a live server var/ was 0755 and the database 0644: another local user read
django_session and replayed an owner session.)"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from apps.core.datadir import secure_data_dir

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_data_dir_and_database_are_private(tmp_path):
    data = tmp_path / "var"
    fixed = secure_data_dir(data, data / "retasc.sqlite3")
    assert fixed == []
    assert mode(data) == 0o700
    assert mode(data / "retasc.sqlite3") == 0o600


def test_existing_loose_modes_are_tightened_with_a_warning(tmp_path, caplog):
    data = tmp_path / "var"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    db = data / "retasc.sqlite3"
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        path.write_bytes(b"")
        os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="retasc.datadir"):
        fixed = secure_data_dir(data, db)
    assert fixed == [data, db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    assert [mode(p) for p in fixed] == [0o700, 0o600, 0o600, 0o600]
    assert len(caplog.records) == 4
    assert "readable by other users (mode 0o644); set to 0o600" in caplog.records[1].getMessage()
    caplog.clear()
    assert secure_data_dir(data, db) == []  # already private: nothing to say
    assert caplog.records == []


@pytest.mark.slow
def test_start_up_creates_private_files_and_warns_about_loose_ones(tmp_path):
    """A real start (``manage.py migrate`` in the embedded mode) in a fresh data directory,
    then again after someone loosened the modes."""
    data = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(RETASC_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="retasc.settings.base", RETASC_INPROCESS_JOBS="false")

    def run(*args):
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )

    first = run("migrate", "--noinput", "-v0")
    assert first.returncode == 0, first.stderr
    db = data / "retasc.sqlite3"
    assert mode(data) == 0o700 and mode(db) == 0o600
    for side in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        if side.exists():
            assert mode(side) == 0o600
    assert "readable by other users" not in first.stderr

    os.chmod(data, 0o755)
    os.chmod(db, 0o644)
    second = run("check")
    assert second.returncode == 0, second.stderr
    assert f"{data} was readable by other users (mode 0o755); set to 0o700." in second.stderr
    assert f"{db} was readable by other users (mode 0o644); set to 0o600." in second.stderr
    assert mode(data) == 0o700 and mode(db) == 0o600
