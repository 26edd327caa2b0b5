"""deploy/: the compose file, the systemd units and the nginx sites run what the scaled
run runs (deploy/scaled.py is the single source), and each file is valid where a tool on
this machine can tell.

Given the commands and environments deploy/scaled.py defines, when compose.yaml, the
unit files and retasc.env are read, then every process's command and environment are
the same (deployment-specific values aside), and every secret is passed as a file.
"""

from __future__ import annotations

import io
import re
import shlex
import shutil
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from deploy.scaled import (
    ROLE_ENV,
    ROOT,
    SECRET_VARS,
    SETUP_COMMANDS,
    SITE_VARS,
    beat_command,
    main,
    nginx_binary,
    nginx_main,
    nginx_site,
    web_command,
    worker_command,
)

DEPLOY = ROOT / "deploy"
SITE_TEMPLATE = (DEPLOY / "nginx" / "retasc.conf").read_text()


def _name(var: str) -> str:
    return var.removesuffix("_FILE")


def assert_environment(env: dict[str, str], role: str, *, secrets_under: str, file_vars=(*SECRET_VARS, "DATABASE_URL")) -> None:
    """``env`` sets exactly the site variables plus the role's fixed ones; secrets (and a
    database URL, which carries a password) only as files under ``secrets_under``."""
    assert sorted(_name(k) for k in env) == sorted({*SITE_VARS, *ROLE_ENV[role]}), role
    assert {k: env[k] for k in ROLE_ENV[role]} == ROLE_ENV[role], role
    for var in file_vars:
        assert var not in env, f"{role}: {var} must come from a file ({var}_FILE)"
        assert env[f"{var}_FILE"].startswith(secrets_under), (role, var)


# --- the scaled run itself ---------------------------------------------------------------


@pytest.mark.parametrize("role", ROLE_ENV)
def test_the_scaled_run_gives_each_role_the_site_and_role_environment(tmp_path, role):
    from deploy.scaled import ScaledRun

    run = ScaledRun(
        "postgres://u@127.0.0.1:5432/db", "redis://127.0.0.1:6379/11", tmp_path, 9000, [9001, 9002], {"RETASC_DB_POOL_SIZE": "8"}
    )
    env = run.env(role)
    ours = {k: v for k, v in env.items() if _name(k) in SITE_VARS or k in ROLE_ENV[role]}
    # Its database URL has no password (loopback, trust): the secrets proper are files.
    assert_environment(ours, role, secrets_under=str(tmp_path / "secrets"), file_vars=SECRET_VARS)
    for var in SECRET_VARS:
        path = Path(env[f"{var}_FILE"])
        assert path.stat().st_mode & 0o777 == 0o600 and path.read_text().strip()
    # Tuning reaches every role except where the role fixes the value (no pool in a worker).
    assert env["RETASC_DB_POOL_SIZE"] == ROLE_ENV[role].get("RETASC_DB_POOL_SIZE", "8")


# --- compose --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "container" / "compose.yaml").read_text())


ROLES = {"setup": "setup", "web1": "web", "web2": "web", "worker": "worker", "beat": "beat"}


def test_compose_has_every_service(compose):
    assert set(compose["services"]) == {"postgres", "redis", *ROLES, "nginx"}


@pytest.mark.parametrize("service", ROLES)
def test_compose_services_run_the_scaled_commands_and_environment(compose, service):
    spec, role = compose["services"][service], ROLES[service]
    env = {k: str(v) for k, v in spec["environment"].items()}
    assert_environment(env, role, secrets_under="/run/secrets/")
    expected = {
        "setup": ["sh", "-c", " && ".join(shlex.join(argv) for argv in SETUP_COMMANDS)],
        "web": web_command("0.0.0.0", 8000),
        "worker": worker_command(),
        "beat": beat_command(env["RETASC_DATA_DIR"]),
    }[role]
    assert spec["command"] == expected
    # Each secret file it names is mounted into it.
    mounted = {f"/run/secrets/{name}" for name in spec["secrets"]}
    assert {v for k, v in env.items() if k.endswith("_FILE")} <= mounted
    # Data directory and key store are named volumes, declared at the top level.
    volumes = {target: source for source, target, *_ in (v.split(":") for v in spec["volumes"])}
    assert volumes[env["RETASC_DATA_DIR"]] in compose["volumes"]
    assert volumes[env["RETASC_KEYSTORE_DIR"]] in compose["volumes"]
    assert volumes[env["RETASC_DATA_DIR"]] != volumes[env["RETASC_KEYSTORE_DIR"]]


def test_compose_checks_health_on_api_health_and_orders_start_up(compose):
    services = compose["services"]
    for name in ("web1", "web2", "nginx"):
        assert "/api/health" in " ".join(services[name]["healthcheck"]["test"]), name
    for name in ("web1", "web2", "worker", "beat"):
        assert services[name]["depends_on"]["setup"] == {"condition": "service_completed_successfully"}
    assert services["nginx"]["depends_on"] == {
        "web1": {"condition": "service_healthy"},
        "web2": {"condition": "service_healthy"},
    }
    # Secrets are files; none is written into the compose file.
    assert all(set(spec) == {"file"} for spec in compose["secrets"].values())
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")


def test_compose_nginx_site_is_the_template_regenerated(compose):
    """deploy/container/nginx/retasc.conf is deploy/nginx/retasc.conf with the compose
    network's values: making it again with the command on its first line gives it back."""
    path = DEPLOY / "container" / "nginx" / "retasc.conf"
    text = path.read_text()
    argv = shlex.split(text.splitlines()[0].split("deploy/scaled-run ", 1)[1])
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    assert out.getvalue() == text, "regenerate it: the command is on its first line"
    assert "./nginx/retasc.conf:/etc/nginx/conf.d/default.conf:ro" in compose["services"]["nginx"]["volumes"]
    upstreams = re.findall(r"^    server (\S+) ", text, flags=re.MULTILINE)
    assert upstreams == [f"{name}:8000" for name in ("web1", "web2")]


def test_the_image_runs_as_a_non_root_user_and_serves_by_default():
    text = (DEPLOY / "container" / "Containerfile").read_text()
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == ["python:3.11-slim", "python:3.11-slim"]
    assert re.search(r"^USER retasc:retasc$", text, flags=re.MULTILINE)
    cmd = re.search(r"^CMD (\[.*\])$", text, flags=re.MULTILINE).group(1)
    assert yaml.safe_load(cmd) == web_command("0.0.0.0", 8000)
    # Everything the app reads at run time is copied in.
    copied = set(re.findall(r"^COPY (\S+) \1$", text, flags=re.MULTILINE))
    assert copied == {"retasc", "apps", "templates", "static", "locale"}


# --- systemd --------------------------------------------------------------------------


def _unit(name: str) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit file (repeated keys keep every value)."""
    out: dict[str, list[str]] = {}
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def _env_file() -> dict[str, str]:
    lines = (DEPLOY / "systemd" / "retasc.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


UNITS = {"retasc-web@.service": "web", "retasc-worker.service": "worker", "retasc-beat.service": "beat"}


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_units_run_the_scaled_commands_and_environment(unit):
    role, spec, env_file = UNITS[unit], _unit(unit), _env_file()
    assert spec["EnvironmentFile"] == ["/etc/retasc/retasc.env"]
    env = {**env_file, **dict(item.split("=", 1) for line in spec["Environment"] for item in shlex.split(line))}
    assert_environment(env, role, secrets_under="/etc/retasc/secrets/")
    argv = shlex.split(spec["ExecStart"][0])
    assert Path(argv[0]).parent == Path("/opt/retasc/.venv/bin")
    expected = {
        "web": web_command("127.0.0.1", "%i"),
        "worker": worker_command(),
        "beat": beat_command(env["RETASC_DATA_DIR"]),
    }[role]
    assert [Path(argv[0]).name, *argv[1:]] == expected
    # Hardening: a dedicated user; the system read-only but for the data directory.
    assert (spec["User"], spec["Group"]) == (["retasc"], ["retasc"])
    for key in ("NoNewPrivileges", "PrivateTmp", "ProtectHome"):
        assert spec[key] == ["yes"], key
    assert spec["ProtectSystem"] == ["strict"]
    assert spec["ReadWritePaths"] == [env["RETASC_DATA_DIR"]]
    assert env["RETASC_KEYSTORE_DIR"].startswith(env["RETASC_DATA_DIR"] + "/")


def test_systemd_units_pass_systemd_analyze_verify():
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.skip("systemd-analyze is not installed")
    units = [str(DEPLOY / "systemd" / name) for name in (*UNITS, "retasc.target")]
    done = subprocess.run([tool, "verify", *units], capture_output=True, text=True, timeout=60)
    # The programs live in /opt/retasc on a real host, not here: that complaint is expected.
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and not re.search(r"Command /opt/retasc/\.venv/bin/\S+ is not executable", line)
    ]
    assert problems == []


# --- nginx ----------------------------------------------------------------------------


def _site(**overrides) -> str:
    kw = {
        "upstreams": ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"],
        "listen": "127.0.0.1:9000",
        "server_name": "localhost",
        "static_root": "/srv/static",
        "access_log": "/srv/logs/a.log",
        "error_log": "/srv/logs/e.log",
    }
    return nginx_site(SITE_TEMPLATE, **{**kw, **overrides})


def test_the_generated_site_replaces_only_deployment_values():
    site = _site()
    assert re.findall(r"^    server (\S+) max_fails=1 fail_timeout=5s;$", site, flags=re.MULTILINE) == [
        "127.0.0.1:9001",
        "127.0.0.1:9002",
        "127.0.0.1:9003",
    ]
    assert re.findall(r"^    listen (\S+);$", site, flags=re.MULTILINE) == ["127.0.0.1:9000"]
    assert "alias /srv/static/;" in site and "/var/lib/retasc" not in site.split("# TLS:")[0]
    assert "/var/log/nginx" not in site


def test_the_site_template_changing_shape_is_an_error():
    with pytest.raises(ValueError, match="changed shape"):
        nginx_site(
            SITE_TEMPLATE.replace("listen [::]:80;", ""),
            **{k: "x" for k in ("listen", "server_name", "static_root", "access_log", "error_log")},
            upstreams=["a:1"],
        )


def test_the_site_caps_bodies_like_the_app():
    """1 MiB for API and Dash bodies; /mcp and uploads as large as the app accepts."""

    def cap(location: str | None) -> int:
        block = SITE_TEMPLATE if location is None else SITE_TEMPLATE.split(f"location {location} {{", 1)[1].split("}", 1)[0]
        size = re.search(r"client_max_body_size (\d+)m;", block).group(1)
        return int(size) * 1024 * 1024

    assert cap(None) == 1024 * 1024
    assert cap("/mcp") == settings.RETASC_MCP_MAX_BODY_BYTES
    assert cap("/api/v1/uploads/") == settings.RETASC_UPLOAD_MAX_BYTES


def test_the_site_is_valid_nginx(tmp_path):
    nginx = nginx_binary()
    if not nginx:
        pytest.skip("nginx is not installed")
    (tmp_path / "tmp").mkdir()
    (tmp_path / "logs").mkdir()
    site = tmp_path / "retasc.conf"
    site.write_text(
        _site(static_root=str(tmp_path / "static"), access_log=str(tmp_path / "a.log"), error_log=str(tmp_path / "e.log"))
    )
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_main(prefix=tmp_path, site=site))
    done = subprocess.run(
        [nginx, "-t", "-q", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "logs" / "error.log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
