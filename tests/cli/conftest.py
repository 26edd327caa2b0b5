"""A live Daphne for the CLI (the MCP tests' server helper, with a 1 s device poll
interval), and helpers to run `retasc` in-process or as a subprocess.

The CLI keeps its state in files: ``XDG_CONFIG_HOME`` points at a per-test directory and
every command runs with a per-test working folder (``cli.folder``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.mcp.conftest import LiveServer, free_port, mcp_client, start_daphne  # noqa: F401  (re-exported)

RETASC = Path(sys.executable).with_name("retasc")


@pytest.fixture(scope="session")
def live_cli(django_db_setup, tmp_path_factory) -> LiveServer:
    server = start_daphne(tmp_path_factory.mktemp("daphne-cli"), RETASC_DEVICE_POLL_INTERVAL_SECONDS="1")
    yield server
    server.stop()


@dataclass
class Cli:
    server: str
    config_home: Path
    folder: Path
    runner: CliRunner = field(default_factory=CliRunner)

    env_extra: dict = field(default_factory=dict)

    def env(self, **extra) -> dict:
        return {
            "XDG_CONFIG_HOME": str(self.config_home),
            "RETASC_SERVER": self.server,
            "RETASC_NO_BROWSER": "1",
            "RETASC_KEY": "",  # never the developer's own key
            **self.env_extra,
            **extra,
        }

    def __call__(self, *args: str, folder: Path | None = None, input: str | None = None):
        """Run `retasc ARGS` in-process in ``folder``; returns the CliRunner result."""
        from retasc.cli.main import app

        here = os.getcwd()
        os.chdir(folder or self.folder)
        try:
            return self.runner.invoke(app, list(args), env=self.env(), input=input, catch_exceptions=False)
        finally:
            os.chdir(here)

    def json(self, *args: str, folder: Path | None = None):
        result = self(*args, "--json", folder=folder)
        assert result.exit_code == 0, result.output + result.stderr
        return json.loads(result.stdout)

    def popen(self, *args: str, folder: Path | None = None) -> subprocess.Popen:
        env = {**os.environ, **self.env(), "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(
            [str(RETASC), *args], cwd=folder or self.folder, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    def sign_in_as(self, user) -> str:
        """Store a personal token for ``user`` as `retasc login` would (skips the browser)."""
        from apps.devices.services import personal_token_mint
        from retasc.cli import config

        token, raw = personal_token_mint(user=user, label="test")
        old = os.environ.get("XDG_CONFIG_HOME")
        os.environ["XDG_CONFIG_HOME"] = str(self.config_home)
        try:
            config.save_credential(self.server, {"token": raw, "tokenPrefix": token.prefix, "email": user.email})
        finally:
            if old is None:
                os.environ.pop("XDG_CONFIG_HOME")
            else:
                os.environ["XDG_CONFIG_HOME"] = old
        return raw


@pytest.fixture
def cli_factory(live_cli, tmp_path):
    made = iter(range(100))

    def make(server: str | None = None) -> Cli:
        n = next(made)
        folder = tmp_path / f"repo{n}"
        folder.mkdir()
        return Cli(server=server or live_cli.base, config_home=tmp_path / f"config{n}", folder=folder)

    return make


@pytest.fixture
def cli(cli_factory) -> Cli:
    return cli_factory()
