"""A task published while serving a request is logged by a real Celery worker under
that request's id (the task header set by ``retasc.celery``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from apps.core import logs
from apps.leases.tasks import reclaim_expired_task
from retasc.celery import app  # noqa: F401  (the app and its task signals, as in a server process)
from tests.ops.conftest import ROOT, source_env

CELERY = Path(sys.executable).with_name("celery")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) for a real worker"),
]


def test_a_worker_logs_the_publishing_request_id(transactional_db, tmp_path):
    queue = f"retasc_ops_{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "worker.log"
    env = source_env(REDIS_URL=settings.REDIS_URL, RETASC_LOG_FORMAT="json", RETASC_LOG_LEVEL="INFO")
    args = [str(CELERY), "-A", "retasc", "worker", "-P", "solo", "-Q", queue, "--without-gossip", "--without-mingle"]
    with open(log_path, "wb") as out:
        worker = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        token = logs.request_id.set("ops-worker-rid-7")
        try:
            reclaim_expired_task.apply_async(queue=queue)
        finally:
            logs.request_id.reset(token)
        deadline, entries = time.monotonic() + 90, []
        while time.monotonic() < deadline and not entries:
            time.sleep(0.5)
            lines = log_path.read_text(errors="replace").splitlines()
            entries = [json.loads(line) for line in lines if line.startswith("{") and '"retasc.jobs"' in line]
            assert worker.poll() is None, log_path.read_text()
    finally:
        worker.terminate()
        worker.wait(30)
    assert entries, log_path.read_text()[-3000:]
    assert entries[0]["request_id"] == "ops-worker-rid-7"
    assert entries[0]["message"].startswith("job reclaim_expired success in ")
