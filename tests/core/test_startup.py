"""Start-up stops with one clear sentence on a bad or wrong master key (SPEC §8, §14).

Each case runs the real entry points in a subprocess against a data directory of its
own: ``manage.py`` (every operator command) and the ASGI module daphne imports.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

BASE = Path(settings.BASE_DIR)
WRONG_KEY = "RETASC_MASTER_KEY does not match the key that encrypted this deployment's data"
BAD_KEY = "RETASC_MASTER_KEY entry 1 is not a base64 encoding of 32 bytes"


def _key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _env(data_dir: Path, master_key: str | None) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RETASC_", "DATABASE_URL", "REDIS_URL", "DJANGO_", "PYTEST", "COV_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="retasc.settings.base",
        RETASC_DATA_DIR=str(data_dir),
        RETASC_INPROCESS_JOBS="false",
        DJANGO_SECRET_KEY="test-only-not-secret",
    )
    if master_key is not None:
        env["RETASC_MASTER_KEY"] = master_key
    return env


def manage(data_dir: Path, master_key: str | None, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        # "help" sets Django up like every command (apps ready, where the key is checked)
        # and needs neither the database nor the URL configuration.
        [sys.executable, "manage.py", *(args or ("help",))],
        cwd=BASE,
        env=_env(data_dir, master_key),
        capture_output=True,
        text=True,
        timeout=120,
    )


def asgi(data_dir: Path, master_key: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import retasc.asgi"],
        cwd=BASE,
        env=_env(data_dir, master_key),
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_sentence(done: subprocess.CompletedProcess, sentence: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("retasc: configuration error: ")
    assert sentence in lines[0]


@pytest.fixture
def deployment(tmp_path):
    """A data directory whose key store canary was written by ``key``."""
    key = _key()
    done = manage(tmp_path, key)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "keys" / "canary").exists()
    return tmp_path, key


def test_right_key_starts(deployment):
    data_dir, key = deployment
    assert manage(data_dir, key).returncode == 0
    done = asgi(data_dir, key)
    assert done.returncode == 0, done.stderr


def test_wrong_key_stops_manage_py(deployment):
    data_dir, _ = deployment
    canary = (data_dir / "keys" / "canary").read_bytes()
    assert_one_sentence(manage(data_dir, _key(), "check"), WRONG_KEY)
    assert_one_sentence(manage(data_dir, _key(), "help"), WRONG_KEY)
    assert (data_dir / "keys" / "canary").read_bytes() == canary  # nothing rewritten


def test_wrong_key_stops_every_command_not_only_check(deployment):
    data_dir, _ = deployment
    database = data_dir / "retasc.sqlite3"

    def state():
        return (database.stat().st_mtime_ns, database.stat().st_size, database.read_bytes()) if database.exists() else None

    before = state()
    assert_one_sentence(manage(data_dir, _key(), "verify_chain"), WRONG_KEY)
    assert state() == before  # stopped before touching the database


def test_wrong_key_stops_the_asgi_server(deployment):
    data_dir, _ = deployment
    assert_one_sentence(asgi(data_dir, _key()), WRONG_KEY)


@pytest.mark.parametrize("command", ["check", "migrate", "verify_chain"])
def test_bad_key_value_stops_manage_py(tmp_path, command):
    assert_one_sentence(manage(tmp_path, "not-a-key", command), BAD_KEY)
    assert not (tmp_path / "retasc.sqlite3").exists()


def test_bad_key_value_stops_the_asgi_server(tmp_path):
    assert_one_sentence(asgi(tmp_path, "not-a-key"), BAD_KEY)


def test_bad_key_is_not_echoed(tmp_path):
    secretish = "c2VjcmV0LWJ1dC10b28tc2hvcnQ"
    done = manage(tmp_path, secretish, "check")
    assert_one_sentence(done, BAD_KEY)
    assert secretish not in done.stderr + done.stdout


def test_rotation_ring_starts_and_reseals_the_canary(deployment):
    data_dir, old = deployment
    new = _key()
    assert manage(data_dir, f"{new},{old}").returncode == 0
    done = manage(data_dir, f"{new},{old}", "rewrap_keys")
    assert done.returncode == 0, done.stderr
    # Once rotated, the new key alone starts; the old one alone no longer does.
    assert manage(data_dir, new).returncode == 0
    assert_one_sentence(manage(data_dir, old), WRONG_KEY)


def test_generated_master_key_when_unset(tmp_path):
    done = manage(tmp_path, None)
    assert done.returncode == 0, done.stderr
    key_file = tmp_path / "master_key"
    assert key_file.exists() and oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert "generated a new master key" in done.stderr
    assert key_file.read_text().strip() not in done.stderr  # the warning never shows the key
    again = manage(tmp_path, None)
    assert again.returncode == 0 and "generated a new master key" not in again.stderr
    # Setting a different key over a generated one is caught like any wrong key.
    assert_one_sentence(manage(tmp_path, _key()), WRONG_KEY)


def test_wrong_key_stops_daphne(deployment):
    daphne = Path(sys.executable).with_name("daphne")
    if not daphne.exists():
        pytest.skip("daphne is not installed next to this Python")
    data_dir, _ = deployment
    done = subprocess.run(
        [str(daphne), "-b", "127.0.0.1", "-p", "0", "retasc.asgi:application"],
        cwd=BASE,
        env=_env(data_dir, _key()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_sentence(done, WRONG_KEY)


def test_master_key_from_a_mounted_file(deployment, tmp_path_factory):
    data_dir, key = deployment
    secrets_dir = tmp_path_factory.mktemp("secrets")
    (secrets_dir / "master_key").write_text(key + "\n")
    env = _env(data_dir, None)
    env["RETASC_MASTER_KEY_FILE"] = str(secrets_dir / "master_key")

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", command], cwd=BASE, env=env, capture_output=True, text=True, timeout=120
        )

    assert run("help").returncode == 0
    env["RETASC_MASTER_KEY_FILE"] = str(secrets_dir / "missing")
    assert_one_sentence(run("check"), "RETASC_MASTER_KEY_FILE points to")


# --- the PostgreSQL pool: servers have one, one-off commands do not ------------------

POOL_PROBE = "from django.conf import settings; print('pool=' + str('pool' in settings.DATABASES['default']['OPTIONS']))"


_POOL_KEY = _key()


def _pool_env(tmp_path, **extra) -> dict:
    # Settings only: nothing here connects (port 1 would refuse).
    return {**_env(tmp_path, _POOL_KEY), "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", **extra}


def test_one_off_commands_run_without_a_pool(tmp_path):
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", POOL_PROBE],
        cwd=BASE,
        env=_pool_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip().splitlines()[-1:] == ["pool=False"], done.stderr
    asked = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", POOL_PROBE],
        cwd=BASE,
        env=_pool_env(tmp_path, RETASC_DB_POOL_SIZE="5"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert asked.stdout.strip().splitlines()[-1:] == ["pool=True"], asked.stderr


PREPARED_PROBE = (
    "from django.conf import settings; o = settings.DATABASES['default']['OPTIONS']; "
    "print('prepared=' + str(o.get('server_side_binding')) + ',' + str(o.get('prepare_threshold')))"
)


def test_postgres_statements_are_prepared_unless_turned_off(tmp_path):
    def probe(**extra):
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", PREPARED_PROBE],
            cwd=BASE,
            env=_pool_env(tmp_path, **extra),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout.strip().splitlines()[-1:], done.stderr

    assert probe()[0] == ["prepared=True,5"], probe()[1]
    # Behind a pooler that cannot keep prepared statements: client-side binding, as Django's default.
    assert probe(RETASC_DB_PREPARED="false")[0] == ["prepared=None,None"]


def test_the_server_settings_have_a_pool(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {POOL_PROBE}"],
        cwd=BASE,
        env=_pool_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip().splitlines()[-1:] == ["pool=True"], done.stderr
