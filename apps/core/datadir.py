"""Permissions of the data directory and the SQLite database (embedded mode).

The data directory holds the SQLite database (sessions included), the generated secrets,
the key store and the chain's head files. Readable by other local users, it gave away
``django_session``: a replayed owner session. So the directory is kept 0700 and the
database with its ``-wal`` and ``-shm`` files 0600, also when they already exist with
looser modes (each such fix is logged as a warning at start-up).

The database file is created here, empty and 0600, before SQLite opens it: SQLite then
creates its ``-wal`` and ``-shm`` files with the database file's permissions.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("retasc.datadir")

DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path, mode: int) -> bool:
    """chmod ``path`` to ``mode`` if group or others have any access; True if it did."""
    try:
        current = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return False
    if current & 0o077 == 0:
        return False
    os.chmod(path, mode)
    log.warning(
        "%s was readable by other users (mode %s); set to %s.",
        path,
        oct(current),
        oct(mode),
    )
    return True


def secure_data_dir(data_dir: Path, sqlite_path: Path | None = None) -> list[Path]:
    """Create or tighten the data directory and the SQLite files; the paths it fixed."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    fixed = [p for p in [data_dir] if _tighten(p, DIR_MODE)]
    if sqlite_path is not None:
        sqlite_path = Path(sqlite_path)
        sqlite_path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        try:
            os.close(os.open(sqlite_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        except FileExistsError:
            pass
        for path in (sqlite_path, Path(f"{sqlite_path}-wal"), Path(f"{sqlite_path}-shm"), Path(f"{sqlite_path}-journal")):
            if _tighten(path, FILE_MODE):
                fixed.append(path)
    return fixed
