"""Screenshots of the notification pages for docs/screenshots/ (docs/dash.md links them).

Runs only when asked, like tests/dash/test_screenshots.py:
``RETASC_SCREENSHOTS_DIR=docs/screenshots pytest tests/dash/test_notify_screenshots.py``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.dash.live import CHROMIUM, CHROMIUM_ARGS, start
from tests.dash.test_screenshots import seed
from tests.fakes.telegram import FakeTelegram

OUT = os.environ.get("RETASC_SCREENSHOTS_DIR")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not OUT, reason="set RETASC_SCREENSHOTS_DIR to write the docs screenshots"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (apt-get install -y chromium)"),
]


def seed_notifications(maya, org, telegram):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from apps.issues.services import issue_update
    from apps.notifications import services
    from apps.notifications.delivery import deliver_due
    from apps.notifications.models import Delivery
    from apps.orgs.services import actor_for_human

    owner = actor_for_human(user=maya, org=org)
    public = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    slack = services.channel_create(actor=owner, kind="slack", bot_token="xoxb-demo", signing_secret="demo-secret")
    services.channel_create(actor=owner, kind="discord", bot_token="discord-demo", public_key=public)
    tg = services.channel_create(actor=owner, kind="telegram", bot_token=telegram.token)
    for channel, target, label in ((slack, "U024BE7LH", "@maya"), (tg, "551234", "@maya_chen")):
        code, _ = services.binding_code_create(actor=owner, channel_id=channel.pk)
        services.binding_redeem(channel=channel, code=code, target=target, label=label)
    services.mute_set(org_id=org.pk, user_id=maya.pk, kind="assigned", muted=True)
    services.webhook_create(actor=owner, url="http://127.0.0.1:9/retasc-events", events=["done", "canceled", "review_requested"])
    issue_update(actor=owner, identifier="API-5", status="canceled", cancel_reason="psycopg 3.3 is already in")
    deliver_due()  # refused: nothing listens on port 9
    Delivery.objects.update(window_start=timezone.now() - timedelta(hours=25), next_attempt_at=timezone.now())
    deliver_due()  # past 24 h: a dead letter


def test_notification_screenshots(transactional_db, tmp_path, settings):
    from django.test import Client
    from playwright.sync_api import sync_playwright

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    out = Path(OUT)
    out.mkdir(parents=True, exist_ok=True)
    with FakeTelegram() as telegram:
        settings.RETASC_TELEGRAM_API_URL = telegram.url
        maya, org = seed()
        seed_notifications(maya, org, telegram)
    client = Client()
    client.force_login(maya)
    cookie = client.cookies["sessionid"].value
    server = start(tmp_path)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            ctx = browser.new_context(base_url=server.base, viewport={"width": 1440, "height": 900}, locale="en-US")
            ctx.add_cookies([{"name": "sessionid", "value": cookie, "url": server.base}])
            page = ctx.new_page()
            page.goto("/notifications/channels/")
            page.screenshot(path=str(out / "notify-channels.png"), full_page=True)
            page.goto("/notifications/bindings/")
            page.select_option("#binding-create select[name=channel]", label="telegram")
            page.click("#binding-create button[type=submit]")
            page.wait_for_timeout(500)
            page.screenshot(path=str(out / "notify-bindings.png"), full_page=True)
            page.goto("/notifications/webhooks/")
            page.screenshot(path=str(out / "notify-webhooks.png"), full_page=True)
            page.goto("/notifications/dead/")
            page.screenshot(path=str(out / "notify-dead.png"), full_page=True)
            browser.close()
    finally:
        server.stop()
