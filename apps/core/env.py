"""Typed readers for the environment.

Every setting Retasc reads comes through these helpers. Each accepts a ``NAME_FILE``
variant (a mounted secret) and raises ``ImproperlyConfigured`` with one clear sentence
on a bad value, so start-up stops instead of running half-configured.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_raw(name: str) -> str | None:
    """The value of ``name``, or the contents of the file named by ``name_FILE``."""
    file_var = f"{name}_FILE"
    path = os.environ.get(file_var)
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{file_var} points to {path!r}, which cannot be read ({exc.strerror}).") from None
    return os.environ.get(name)


def env_str(name: str, default: str = "") -> str:
    value = env_raw(name)
    return default if value is None else value.strip()


def env_bool(name: str, default: bool) -> bool:
    value = env_raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}.")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = env_raw(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, not {number}.")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict:
    """Django DATABASES entry for a ``postgres://`` or ``sqlite:///`` URL."""

    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql", "pgsql"):
        if not parsed.path.strip("/"):
            raise ImproperlyConfigured(f"{name} must name a database, e.g. postgres://user@host:5432/retasc.")
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 0,
            "OPTIONS": options,
        }
    if parsed.scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ImproperlyConfigured(f"{name} must look like sqlite:///path/to/file.sqlite3.")
        return sqlite_database(Path(path))
    raise ImproperlyConfigured(f"{name} must start with postgres:// or sqlite:///, not {parsed.scheme or url!r}.")


def sqlite_database(path: Path) -> dict:
    # IMMEDIATE makes every atomic block take the write lock up front: claims and
    # sequence allocation serialize without "database is locked" upgrades mid-way.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        },
        "TEST": {"NAME": str(path.with_name(path.stem + "-test.sqlite3"))},
    }
