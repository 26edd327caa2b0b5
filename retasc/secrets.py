"""Secrets generated once into the data directory for the embedded mode."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path


def generated_secret(data_dir: Path, filename: str, *, what: str, make=None) -> str:
    """Read ``filename`` from the data directory, creating it (mode 0600) the first time.

    Creation prints one warning line, because losing this file loses what it protects.
    """
    path = data_dir / filename
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = make() if make else secrets.token_urlsafe(50)
    # O_EXCL: two processes starting at once must not write two different keys.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    print(
        f"retasc: generated a new {what} in {path}; back it up (see README, Backups).",
        file=sys.stderr,
    )
    return value
