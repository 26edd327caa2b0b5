"""The claim tokens ``retasc next`` received, remembered per folder so that
``retasc issue done ACME-3 --evidence ...`` works with no token pasted.

They live in ``.retasc/claims.json`` (mode 0600) beside the folder's key: a claim token
is a bearer secret for its issue, like the key itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from retasc.cli import config
from retasc.cli.errors import LOCAL, CliError

FILE = "claims.json"


def _path(st) -> Path:
    base = st.binding.folder if st.binding is not None else Path.cwd()
    return base / config.BIND_DIR / FILE


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError(f"Cannot read {path}: {exc}.", exit_code=LOCAL) from None
    return data if isinstance(data, dict) else {}


def remember(st, identifier: str, token: str) -> None:
    path = _path(st)
    data = _load(path)
    data[identifier.upper()] = token
    config.write_private(path, json.dumps(data, indent=2) + "\n")


def token_for(st, identifier: str, given: str | None) -> str | None:
    """The token to send: the one given, else the one this folder's ``retasc next`` got."""
    return given or _load(_path(st)).get(identifier.upper())


def forget(st, identifier: str) -> None:
    path = _path(st)
    data = _load(path)
    if data.pop(identifier.upper(), None) is not None:
        config.write_private(path, json.dumps(data, indent=2) + "\n")
