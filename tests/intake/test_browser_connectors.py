"""The Connectors page in a real browser (Playwright driving Debian's Chromium) against a
live Daphne: an owner connects a repository (the secret is shown once), a signed
delivery arrives over HTTP, and the delivery log shows it. With RETASC_SCREENSHOTS_DIR
set, the page with its delivery log is photographed for docs/intake.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx2
import pytest

from apps.intake.models import Connector
from tests.dash.live import CHROMIUM, CHROMIUM_ARGS, start
from tests.intake.hooks import payload, sign

pytestmark = [pytest.mark.slow]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None:
    pytestmark.append(pytest.mark.skip(reason="playwright is not installed (pip install -r requirements/dev.txt)"))
elif not CHROMIUM.exists():
    pytestmark.append(pytest.mark.skip(reason="/usr/bin/chromium is missing (apt-get install -y chromium)"))


def _deliver(base, connector_id, secret, event, data, delivery):
    body = json.dumps(data).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(secret, body),
    }
    return httpx2.post(f"{base}/hooks/github/{connector_id}", content=body, headers=headers, timeout=30)


def test_connect_a_repository_and_watch_the_delivery_log(tworld, tmp_path):
    from django.test import Client

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API owns this thread's loop
    client = Client()
    client.force_login(tworld.owner)
    assert client.get("/org/connectors/").status_code == 200
    cookie = client.cookies["sessionid"].value
    server = start(tmp_path)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            ctx = browser.new_context(base_url=server.base, viewport={"width": 1440, "height": 900})
            ctx.add_cookies([{"name": "sessionid", "value": cookie, "url": server.base}])
            page = ctx.new_page()
            page.goto("/org/connectors/")
            page.select_option("#connector-create select[name=provider]", "github")
            page.fill("#connector-create input[name=repo]", "octocat/Hello-World")
            page.check("#connector-create input[name=pr_sync]")
            page.click("#connector-create button[type=submit]")
            secret = page.locator("#new-secret").inner_text().strip()
            connector = Connector.objects.get()
            assert secret == connector.secret and connector.pr_sync is True

            assert _deliver(server.base, connector.pk, secret, "ping", payload("github", "ping"), "3f1c-ping").status_code == 202
            opened = payload("github", "issues-opened")
            assert _deliver(server.base, connector.pk, secret, "issues", opened, "8a2e-open").status_code == 202
            comment = payload("github", "issue_comment-created")
            assert _deliver(server.base, connector.pk, secret, "issue_comment", comment, "c41d-comment").status_code == 202
            assert _deliver(server.base, connector.pk, "wrong", "issues", opened, "bad").status_code == 401

            page.goto("/org/connectors/")
            expect(page.locator("#new-secret")).to_have_count(0)  # shown once
            log = page.locator("#delivery-log")
            expect(log.locator('[data-delivery="8a2e-open"]')).to_contain_text("created from #1347")
            expect(log.locator('[data-delivery="c41d-comment"]')).to_contain_text("hubot")
            expect(page.locator(f'[data-connector="{connector.pk}"]')).to_contain_text("live")
            out = os.environ.get("RETASC_SCREENSHOTS_DIR")
            if out:
                Path(out).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(out) / "connectors.png"), full_page=True)
            browser.close()
    finally:
        server.stop()
