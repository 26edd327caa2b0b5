"""`pipx install .` (or `pip install .`) gives a working `retasc` on the PATH: the wheel
names the CLI's dependencies and its entry point, and the installed script runs the CLI
from the installed files, not from this checkout. Built offline (no build isolation)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_wheel_installs_a_working_retasc(tmp_path):
    ours = Path(sys.executable).with_name("retasc")
    had_ours = ours.exists()
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True, timeout=600
    )
    (wheel,) = wheels.glob("retasc-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(info).decode()
        entry_points = z.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "retasc = retasc.cli:main" in entry_points
    assert "License-Expression: Apache-2.0" in metadata
    for dependency in ("typer", "rich", "httpx2"):
        assert f"Requires-Dist: {dependency}" in metadata
    assert "retasc/cli/main.py" in names and "retasc/cli/issue_write.py" in names

    prefix = tmp_path / "prefix"
    # --ignore-installed: never uninstall the checkout's own (editable) retasc from this environment
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--ignore-installed", "--prefix", str(prefix), str(wheel)], check=True, timeout=300
    )
    site = prefix / Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    script = prefix / "bin" / "retasc"
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RETASC_SERVER": "http://127.0.0.1:9"}
    version = subprocess.run([str(script), "--version"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("retasc "), version.stderr
    where = subprocess.run(
        [sys.executable, "-c", "import retasc.cli.output as m; print(m.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr
    help_text = subprocess.run([str(script), "issue", "--help"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert "create" in help_text.stdout and "done" in help_text.stdout
    assert ours.exists() == had_ours  # this environment's own retasc is untouched
