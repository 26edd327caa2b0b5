"""Where the CLI keeps things.

- Credentials (personal tokens, one per server) in the user config directory:
  ``$XDG_CONFIG_HOME/retasc/credentials.json`` (default ``~/.config/retasc``), mode 0600,
  with the server signed in to last: outside a bound folder it is the default server, so
  ``retasc login --server URL`` once is enough for the commands after it.
- A folder's binding in ``.retasc/`` beside the code: ``config.json`` (no secret: server,
  org, project, key prefix) and ``key`` (the agent key, mode 0600). ``.retasc/`` is
  git-ignored twice over: a ``.retasc/.gitignore`` of ``*`` and a line in ``.gitignore``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from retasc.cli.errors import LOCAL, CliError

DEFAULT_SERVER = "http://127.0.0.1:8000"
BIND_DIR = ".retasc"


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "retasc"


def credentials_path() -> Path:
    return config_dir() / "credentials.json"


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (created 0600, never world-readable in between)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError(f"Cannot read {path}: {exc}.", exit_code=LOCAL) from None
    return data if isinstance(data, dict) else {}


def load_credentials() -> dict:
    return _read_json(credentials_path()).get("servers", {})


def last_server() -> str | None:
    """The server signed in to last, while its credential is kept."""
    data = _read_json(credentials_path())
    last = data.get("last")
    return last if isinstance(last, str) and last in data.get("servers", {}) else None


def credential_for(server: str) -> dict | None:
    return load_credentials().get(server)


def save_credential(server: str, credential: dict | None) -> None:
    servers, last = load_credentials(), last_server()
    if credential is None:
        servers.pop(server, None)
        last = None if last == server else last
    else:
        servers[server] = credential
        last = server
    data = {"servers": servers, **({"last": last} if last else {})}
    write_private(credentials_path(), json.dumps(data, indent=2) + "\n")


@dataclass
class Binding:
    folder: Path
    server: str
    org: str
    project: str
    runtime: str
    key_prefix: str
    key_id: int | None

    @property
    def dir(self) -> Path:
        return self.folder / BIND_DIR

    @property
    def key_path(self) -> Path:
        return self.dir / "key"

    def key(self) -> str:
        try:
            return self.key_path.read_text().strip()
        except OSError:
            raise CliError(
                f"This folder's agent key is missing ({self.key_path}); run retasc bind --force.", exit_code=LOCAL
            ) from None

    def as_dict(self) -> dict:
        return {
            "server": self.server,
            "org": self.org,
            "project": self.project,
            "runtime": self.runtime,
            "keyPrefix": self.key_prefix,
            "keyId": self.key_id,
        }


def find_binding(start: Path | None = None) -> Binding | None:
    """The binding of this folder or the nearest parent that has one."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        cfg = folder / BIND_DIR / "config.json"
        if cfg.is_file():
            data = _read_json(cfg)
            return Binding(
                folder=folder,
                server=data.get("server", ""),
                org=data.get("org", ""),
                project=data.get("project", ""),
                runtime=data.get("runtime", ""),
                key_prefix=data.get("keyPrefix", ""),
                key_id=data.get("keyId"),
            )
    return None


def write_binding(binding: Binding, raw_key: str) -> None:
    binding.dir.mkdir(parents=True, exist_ok=True)
    (binding.dir / ".gitignore").write_text("# Written by retasc bind: this folder holds a secret.\n*\n")
    write_private(binding.key_path, raw_key + "\n")
    (binding.dir / "config.json").write_text(json.dumps(binding.as_dict(), indent=2) + "\n")
    ensure_gitignored(binding.folder)


def ensure_gitignored(folder: Path) -> None:
    path = folder / ".gitignore"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    if any(line.strip() in (".retasc", ".retasc/", "/.retasc", "/.retasc/") for line in lines):
        return
    text = "\n".join(lines)
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + "# Retasc agent key (retasc bind)\n.retasc/\n")


def update_key(binding: Binding, raw_key: str, key_prefix: str, key_id: int | None) -> None:
    binding.key_prefix, binding.key_id = key_prefix, key_id
    write_binding(binding, raw_key)
