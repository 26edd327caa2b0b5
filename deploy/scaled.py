"""The scaled mode on one machine, and the one place its commands and environment live.

    deploy/scaled-run up --database-url postgres://postgres@127.0.0.1:5432/retasc_scaled \\
        --redis-url redis://127.0.0.1:6379/11 --port 8080

migrates, collects static files, then starts on loopback: nginx (a site generated from
deploy/nginx/retasc.conf), two Daphne processes, a Celery worker and a Celery beat, and
stops them all on Ctrl-C or SIGTERM. The database must exist; secrets are generated into
files under ``--workdir`` and handed over as ``*_FILE`` variables, as a real deployment
does with mounted secrets.

``web_command``, ``worker_command``, ``beat_command``, ``SETUP_COMMANDS``, ``ROLE_ENV``
and ``SITE_VARS`` are what deploy/systemd and deploy/container run as well:
tests/deploy compares the unit files and compose.yaml against them, and drives this
scaled run, so the three stay one configuration.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NGINX_SITE = ROOT / "deploy" / "nginx" / "retasc.conf"

# --- what every deployment runs -------------------------------------------------------


# The ASGI servers a web process can run. Daphne is the default, and the one the unit
# files and compose.yaml run; uvicorn is measured beside it (docs/benchmarks.md).
SERVERS = ("daphne", "uvicorn")


def web_command(host: str, port: int | str, server: str = "daphne") -> list[str]:
    """One web process. ``--proxy-headers``: the client address and scheme come from
    nginx's X-Forwarded-For / X-Forwarded-Proto (the process listens on loopback or a
    private network only, so nothing else can set them)."""
    if server == "uvicorn":
        # The same application; uvicorn trusts forwarded headers from 127.0.0.1 only (its
        # default), logs no access lines (as Daphne without --access-log), and on SIGTERM
        # waits up to 20 s for the requests in flight (apps.core.graceful's bound).
        return [
            "uvicorn",
            "--proxy-headers",
            "--host",
            host,
            "--port",
            str(port),
            "--no-access-log",
            "--lifespan",
            "off",
            "--timeout-graceful-shutdown",
            "20",
            "retasc.asgi:application",
        ]
    if server != "daphne":
        raise ValueError(f"unknown server {server!r} (one of {', '.join(SERVERS)})")
    return ["daphne", "--proxy-headers", "-b", host, "-p", str(port), "retasc.asgi:application"]


def worker_command() -> list[str]:
    # The periodic jobs are short and idempotent; two pool processes are plenty.
    return ["celery", "-A", "retasc", "worker", "--loglevel", "INFO", "--concurrency", "2"]


def beat_command(data_dir: str | Path) -> list[str]:
    # The schedule file goes to the data directory: the code directory is read-only.
    return ["celery", "-A", "retasc", "beat", "--loglevel", "INFO", "--schedule", f"{data_dir}/celerybeat-schedule"]


# Before the processes start (and after every upgrade): schema, then static files for nginx.
SETUP_COMMANDS = [
    ["python", "manage.py", "migrate", "--noinput"],
    ["python", "manage.py", "collectstatic", "--noinput"],
]

# Fixed per role. Web processes leave the periodic jobs to beat + worker. The worker's
# pool processes and beat need no connection pool (beat never touches the database).
ROLE_ENV: dict[str, dict[str, str]] = {
    "setup": {"RETASC_INPROCESS_JOBS": "false"},
    "web": {"RETASC_INPROCESS_JOBS": "false"},
    "worker": {"RETASC_INPROCESS_JOBS": "false", "RETASC_DB_POOL_SIZE": "0"},
    "beat": {"RETASC_INPROCESS_JOBS": "false", "RETASC_DB_POOL_SIZE": "0"},
}

# Set by every deployment, with its own values, for every role: all processes read the
# same settings (a worker encrypts receipts, so it needs the keys too). Secrets among
# them are always passed as NAME_FILE (a file only the service can read).
SITE_VARS = (
    "DATABASE_URL",
    "REDIS_URL",
    "RETASC_DATA_DIR",
    "RETASC_KEYSTORE_DIR",
    "RETASC_MASTER_KEY",
    "DJANGO_SECRET_KEY",
    "RETASC_PUBLIC_URL",
    "RETASC_ALLOWED_HOSTS",
)
SECRET_VARS = ("RETASC_MASTER_KEY", "DJANGO_SECRET_KEY")

# --- nginx ----------------------------------------------------------------------------


def _sub(pattern: str, repl: str, text: str, count: int) -> str:
    new, n = re.subn(pattern, lambda _m: repl, text, flags=re.MULTILINE)
    if n != count:
        raise ValueError(f"deploy/nginx/retasc.conf changed shape: {pattern!r} matched {n} times, not {count}")
    return new


def nginx_site(
    template: str, *, upstreams: list[str], listen: str, server_name: str, static_root: str, access_log: str, error_log: str
) -> str:
    """deploy/nginx/retasc.conf with its deployment-specific values replaced. Raises
    ValueError when a directive it replaces is missing or doubled."""
    servers = "".join(f"    server {u} max_fails=1 fail_timeout=5s;\n" for u in upstreams)
    text = _sub(
        r"^    server 127\.0\.0\.1:\d+ max_fails=1 fail_timeout=5s;\n(?:    server 127\.0\.0\.1:\d+ .*\n)*", servers, template, 1
    )
    text = _sub(r"^    listen 80;\n    listen \[::\]:80;\n    server_name retasc\.example\.com;\n", "", text, 1)
    text = _sub(r"^server \{\n", f"server {{\n    listen {listen};\n    server_name {server_name};\n", text, 1)
    text = _sub(r"^    access_log /var/log/nginx/retasc\.access\.log retasc;", f"    access_log {access_log} retasc;", text, 1)
    text = _sub(r"^    error_log /var/log/nginx/retasc\.error\.log;", f"    error_log {error_log};", text, 1)
    return _sub(r"alias /var/lib/retasc/static/;", f"alias {static_root.rstrip('/')}/;", text, 1)


def nginx_main(*, prefix: Path, site: Path) -> str:
    """A whole nginx.conf for an nginx of its own under ``prefix`` (pid, logs, temp files) serving ``site``."""
    user = ""
    if os.geteuid() == 0:
        # As root nginx would run its workers as "nobody", who cannot read the static
        # files in a private work directory: keep them as the invoking user.
        import pwd

        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n"
    temp = "\n".join(
        f"    {kind}_temp_path {prefix}/tmp/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        f"{user}worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log warn;\n"
        "events { worker_connections 1024; }\n"
        "http {\n    include /etc/nginx/mime.types;\n    default_type application/octet-stream;\n"
        f"    sendfile on;\n{temp}\n    include {site};\n}}\n"
    )


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


# --- the scaled run -------------------------------------------------------------------


def resolve(argv: list[str]) -> list[str]:
    """Programs from the Python environment running this script."""
    here = Path(sys.executable)
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if argv[0] in ("daphne", "uvicorn", "celery"):
        return [str(here.with_name(argv[0])), *argv[1:]]
    return argv


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict
    log_path: Path
    popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        with open(self.log_path, "ab") as log:
            # Its own process group: kill -9 takes a Celery worker's pool processes too.
            self.popen = subprocess.Popen(
                resolve(self.argv), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen:
            self.popen.wait(10)

    def stop(self, timeout: float = 25) -> None:
        if not self.alive():
            return
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class ScaledRun:
    """nginx + ``len(web_ports)`` Daphne processes + Celery worker + beat, on loopback.

    ``extra_env`` adds tuning variables (lease TTL, job interval, pool size) to every role;
    ``server`` is the ASGI server of the web processes (``SERVERS``).
    """

    database_url: str
    redis_url: str
    workdir: Path
    port: int
    web_ports: list[int]
    extra_env: dict[str, str] = field(default_factory=dict)
    server: str = "daphne"
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        for sub in ("data", "secrets", "logs", "nginx/tmp", "nginx/logs"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.base = f"http://127.0.0.1:{self.port}"
        self._secret_file("RETASC_MASTER_KEY", lambda: __import__("base64").urlsafe_b64encode(os.urandom(32)).decode())
        self._secret_file("DJANGO_SECRET_KEY", lambda: secrets.token_urlsafe(50))

    def _secret_file(self, name: str, make) -> Path:
        path = self.workdir / "secrets" / name.lower()
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(make() + "\n")
        return path

    # -- configuration --

    def site_env(self) -> dict[str, str]:
        return {
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "RETASC_DATA_DIR": str(self.data_dir),
            "RETASC_KEYSTORE_DIR": str(self.data_dir / "keys"),
            "RETASC_MASTER_KEY_FILE": str(self.workdir / "secrets" / "retasc_master_key"),
            "DJANGO_SECRET_KEY_FILE": str(self.workdir / "secrets" / "django_secret_key"),
            "RETASC_PUBLIC_URL": self.base,
            "RETASC_ALLOWED_HOSTS": "127.0.0.1,localhost",
        }

    def env(self, role: str) -> dict[str, str]:
        """The whole environment of a ``role`` process: this shell's, minus any Retasc
        setting it carries, plus the site's, the role's and the tuning variables."""
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RETASC_", "DJANGO_", "DATABASE_URL", "REDIS_URL", "CELERY_"))
        }
        # The role's fixed values win over tuning: a worker never gets a pool.
        return {**inherited, "PYTHONUNBUFFERED": "1", **self.site_env(), **self.extra_env, **ROLE_ENV[role]}

    def command(self, role: str, port: int | None = None) -> list[str]:
        if role == "web":
            return web_command("127.0.0.1", port, self.server)
        if role == "worker":
            return worker_command()
        return beat_command(self.data_dir)

    # -- processes --

    def setup(self) -> None:
        # The setup commands do not depend on each other: run them side by side.
        running = [
            (
                argv,
                subprocess.Popen(
                    resolve([*argv, "-v0"]), cwd=ROOT, env=self.env("setup"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                ),
            )
            for argv in SETUP_COMMANDS
        ]
        for argv, proc in running:
            out = proc.communicate(timeout=600)[0].decode(errors="replace")
            if proc.returncode:
                raise RuntimeError(f"{shlex.join(argv)} failed:\n{out}")

    def _proc(self, name: str, role: str, port: int | None = None) -> Proc:
        n = sum(1 for p in self.workdir.joinpath("logs").iterdir() if p.name.startswith(name + "."))
        proc = Proc(name, self.command(role, port), self.env(role), self.workdir / "logs" / f"{name}.{n}.log")
        self.procs[name] = proc.start()
        return proc

    def start_web(self, port: int) -> Proc:
        return self._proc(f"web-{port}", "web", port)

    def start_worker(self) -> Proc:
        return self._proc("worker", "worker")

    def start_beat(self) -> Proc:
        return self._proc("beat", "beat")

    def write_nginx(self) -> Path:
        prefix = self.workdir / "nginx"
        site = prefix / "retasc.conf"
        site.write_text(
            nginx_site(
                NGINX_SITE.read_text(),
                upstreams=[f"127.0.0.1:{p}" for p in self.web_ports],
                listen=f"127.0.0.1:{self.port}",
                server_name="127.0.0.1 localhost",
                static_root=str(self.data_dir / "static"),
                access_log=str(prefix / "logs" / "access.log"),
                error_log=str(prefix / "logs" / "error.log"),
            )
        )
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_main(prefix=prefix, site=site))
        return conf

    def start_nginx(self) -> Proc:
        nginx = nginx_binary()
        if not nginx:
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx)")
        conf, prefix = self.write_nginx(), self.workdir / "nginx"
        argv = [nginx, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "logs" / "error.log"), "-g", "daemon off;"]
        test = subprocess.run([*argv[:-2], "-t"], capture_output=True, text=True)
        if test.returncode:
            raise RuntimeError(f"nginx -t failed:\n{test.stderr}")
        proc = Proc("nginx", argv, dict(os.environ), self.workdir / "logs" / "nginx.log")
        self.procs["nginx"] = proc.start()
        return proc

    def wait_healthy(self, base: str, proc: Proc, seconds: float = 90) -> None:
        """Until ``base``/api/health answers 200 (database and Redis reachable)."""
        deadline = time.monotonic() + seconds
        while True:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/health", timeout=3) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{base}/api/health did not answer 200 within {seconds} s:\n{proc.log()[-3000:]}")
            time.sleep(0.2)

    def up(self, *, setup: bool = True, jobs: bool = True) -> None:
        """Setup, then every process; returns when nginx answers /api/health.
        ``setup=False`` skips migrate and collectstatic (already done on this database and
        work directory); ``jobs=False`` starts no Celery worker and beat (the benchmark's
        web processes, like its single Daphne, run without them)."""
        if setup:
            self.setup()
        webs = [self.start_web(port) for port in self.web_ports]
        if jobs:
            self.start_worker()
            self.start_beat()
        for port, web in zip(self.web_ports, webs, strict=True):
            self.wait_healthy(f"http://127.0.0.1:{port}", web)
        self.wait_healthy(self.base, self.start_nginx())

    def down(self, timeout: float = 25) -> None:
        """SIGTERM to nginx first (no new requests), then to the rest at once; SIGKILL
        whatever is still running after ``timeout`` seconds."""
        if "nginx" in self.procs:
            self.procs["nginx"].stop()
        rest = [p for name, p in self.procs.items() if name != "nginx"]
        for proc in rest:
            proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in rest:
            if proc.popen is not None:
                try:
                    proc.popen.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill9()

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``manage.py ARGS`` with this run's settings (exit status not checked)."""
        argv = resolve(["python", "manage.py", *args])
        return subprocess.run(argv, cwd=ROOT, env=self.env("setup"), capture_output=True, text=True, timeout=timeout)


# --- command line ---------------------------------------------------------------------


def _up(o) -> int:
    import tempfile

    workdir = Path(o.workdir) if o.workdir else Path(tempfile.mkdtemp(prefix="retasc-scaled-"))
    ports = [o.first_web_port + i for i in range(o.web)]
    run = ScaledRun(o.database_url, o.redis_url, workdir, o.port, ports, server=o.server)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        run.up()
        print(f"Retasc on {run.base} (nginx -> {o.server} {', '.join(map(str, ports))}; Celery worker and beat)")
        print(f"Logs: {workdir / 'logs'}. For manage.py, this environment (secrets are files):")
        for name, value in {**run.site_env(), **ROLE_ENV["setup"]}.items():
            print(f"  {name}={shlex.quote(value)}")
        print("Ctrl-C stops everything.", flush=True)
        while not stop and all(p.alive() for p in run.procs.values()):
            time.sleep(0.5)
        dead = [p.name for p in run.procs.values() if not p.alive()]
        if dead:
            print(f"stopping: {', '.join(dead)} exited (see the logs)", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        run.down()


def _site(o, argv: list[str]) -> int:
    # The first line says how the file was made, so a check can make it again and compare.
    sys.stdout.write(f"# Generated from deploy/nginx/retasc.conf by: deploy/scaled-run {shlex.join(argv)}\n")
    sys.stdout.write(
        nginx_site(
            NGINX_SITE.read_text(),
            upstreams=o.upstream,
            listen=o.listen,
            server_name=o.server_name,
            static_root=o.static_root,
            access_log=o.access_log,
            error_log=o.error_log,
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scaled-run", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="run the scaled mode on this machine until Ctrl-C")
    up.add_argument("--database-url", default=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/retasc_scaled"))
    up.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/11"))
    up.add_argument("--port", type=int, default=8080, help="nginx's port on 127.0.0.1")
    up.add_argument("--web", type=int, default=2, help="how many web processes")
    up.add_argument("--server", choices=SERVERS, default="daphne", help="the ASGI server of the web processes")
    up.add_argument("--first-web-port", type=int, default=8001)
    up.add_argument("--workdir", help="data, secrets and logs (default: a new temporary directory)")
    site = sub.add_parser("nginx-site", help="print deploy/nginx/retasc.conf with other upstreams, listen address and paths")
    site.add_argument("--upstream", action="append", required=True, help="HOST:PORT of a Daphne process (repeat)")
    site.add_argument("--listen", default="80")
    site.add_argument("--server-name", default="retasc.example.com")
    site.add_argument("--static-root", default="/var/lib/retasc/static")
    site.add_argument("--access-log", default="/var/log/nginx/retasc.access.log")
    site.add_argument("--error-log", default="/var/log/nginx/retasc.error.log")
    argv = sys.argv[1:] if argv is None else argv
    o = p.parse_args(argv)
    if o.cmd == "up":
        if not o.database_url.startswith(("postgres://", "postgresql://")):
            p.error("the scaled mode needs PostgreSQL (--database-url postgres://...)")
        return _up(o)
    return _site(o, argv)


if __name__ == "__main__":
    sys.exit(main())
