"""Screenshots of the main Dash pages for docs/screenshots/ (docs/dash.md links them).

Runs only when asked: ``RETASC_SCREENSHOTS_DIR=docs/screenshots pytest tests/dash/test_screenshots.py``.
The Chinese pages need a CJK font on the machine (Debian: ``apt-get install fonts-wqy-microhei``),
or Chromium draws their text as empty boxes.
Seeds a realistic org through the services, then photographs each page in Chromium.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.dash.live import CHROMIUM, CHROMIUM_ARGS
from tests.live import start_daphne

OUT = os.environ.get("RETASC_SCREENSHOTS_DIR")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not OUT, reason="set RETASC_SCREENSHOTS_DIR to write the docs screenshots"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (apt-get install -y chromium)"),
]


def seed():
    from apps.issues import services as issues
    from apps.issues.models import Claim, Issue
    from apps.leases import services as leases
    from apps.orgs.services import (
        actor_for_human,
        agent_key_authenticate,
        agent_key_mint,
        invite_create,
        member_add,
        org_create,
        project_create,
        user_get_or_create,
    )

    maya, _ = user_get_or_create(email="maya@acme.dev", password="pw-maya-123", name="Maya Chen")
    li, _ = user_get_or_create(email="li.wei@acme.dev", password="pw-li-1234", name="Li Wei")
    sam, _ = user_get_or_create(email="sam@acme.dev", password="pw-sam-1234", name="Sam Ortiz")
    org = org_create(name="Acme Robotics", owner=maya)
    api = project_create(org=org, prefix="API", name="Backend API")
    project_create(org=org, prefix="WEB", name="Web app")
    member_add(org=org, user=li)
    member_add(org=org, user=sam)

    def agent(user, runtime, label, project=api):
        _, raw = agent_key_mint(org=org, user=user, project=project, runtime=runtime, label=label)
        return agent_key_authenticate(raw)

    a_maya = agent(maya, "claude-code", "maya laptop")
    a_li = agent(li, "codex", "li desktop")
    a_sam = agent(sam, "cursor", "sam")
    a_ci = agent(maya, "ci", "nightly CI")
    agent(li, "gemini", "li experiments")
    human = actor_for_human(user=maya, org=org)
    now = timezone.now()
    # Runtime usage as `retasc usage push` reports it (counts only), for the fleet view.
    from apps.billing.usage import usage_report

    for actor, runtime, model, scale in (
        (a_maya, "claude-code", "claude-sonnet-4-5", 9),
        (a_li, "codex", "gpt-5-codex", 6),
        (a_sam, "cursor", "", 2),
    ):
        days = [
            {
                "day": (now - timedelta(days=d)).date().isoformat(),
                "model": model,
                "inputTokens": scale * (41_000 + 3_100 * d),
                "outputTokens": scale * (7_300 + 410 * d),
                "cacheReadTokens": scale * 180_000,
                "sessions": 1 + (d + scale) % 3,
                "messages": scale * (11 + d),
            }
            for d in range(6)
        ]
        usage_report(actor=actor, runtime=runtime, days=days)

    def new(actor, title, **kw):
        kw.setdefault("work", True)
        if "blocked_by" not in kw:
            kw.setdefault("no_dependency", "independent")
        return issues.issue_create(actor=actor, title=title, **kw)

    body = (
        "Search is hammered by one tenant's crawler.\n\n"
        "- [x] apply a token bucket per key\n- [ ] return `429` with `Retry-After`\n\n"
        "```python\nlimiter = TokenBucket(rate=50, burst=100)\n```\n\n"
        "See the [incident notes](https://example.com/incidents/42)."
    )
    i1 = new(
        a_maya,
        "Rate-limit the public search endpoint",
        body=body,
        priority=1,
        labels=["api", "incident"],
        due_at=(now + timedelta(days=2)).isoformat(),
        acceptance=["429 with Retry-After under load", "limits per key, not per IP"],
    )
    i2 = new(a_li, "Migrate sessions table to UUID keys", priority=2, labels=["db"])
    new(human, "Add OpenAPI examples for /issues", priority=3, labels=["docs"])
    new(a_ci, "Flaky test: test_reclaim_under_load", priority=2, labels=["flaky"], body="Fails 1 in 40 on PostgreSQL.")
    new(a_sam, "Upgrade psycopg to 3.3", priority=4)
    new(a_maya, "Deprecate the v0 auth header", blocked_by=[i2.identifier], priority=3)
    new(human, "Q1 hardening", work=False, no_dependency="umbrella")
    i8 = new(a_maya, "Fix N+1 in the activity feed", priority=3, assignee="maya@acme.dev")
    new(human, "Customer import stuck at 80%", priority=1, labels=["support"])
    Issue.objects.filter(pk=Issue.objects.get(project=api, number=9).pk).update(awaiting_triage=True, source="github")
    new(a_sam, "Dark mode for the Dash", project="WEB", priority=3)
    new(a_li, "Keyboard shortcuts on the queue", project="WEB", priority=4, due_at=(now + timedelta(days=9)).date().isoformat())
    done = new(a_maya, "Login page copy review", project="WEB", priority=4)
    issues.issue_update(actor=human, identifier=done.identifier, status="done")

    # Live claims by three runtimes; one of them resumed after a reclaim.
    c1 = leases.claim_issue(actor=a_li, identifier=i1.identifier)
    leases.checkpoint(
        actor=a_li, identifier=i1.identifier, note="Token bucket in place; wiring Retry-After next.", claim_token=c1["claimToken"]
    )
    Claim.objects.filter(issue=i1, ended_at__isnull=True).update(expires_at=now - timedelta(seconds=1))
    Issue.objects.filter(pk=i1.pk).update(lease_expires_at=now - timedelta(seconds=1))
    leases.claim_issue(actor=a_maya, identifier=i1.identifier)  # reclaimed, resumed from the checkpoint
    leases.claim_issue(actor=a_sam, identifier=i2.identifier)
    c8 = leases.claim_issue(actor=a_li, identifier=i8.identifier)
    leases.checkpoint(
        actor=a_li,
        identifier=i8.identifier,
        note="Prefetched principals and keys; 41 queries -> 3.",
        claim_token=c8["claimToken"],
    )
    issues.issue_update(actor=a_li, identifier=i8.identifier, status="review", claim_token=c8["claimToken"])
    leases.next_issue(actor=a_ci)
    issues.comment_create(actor=a_li, issue=i1.identifier, body="Bucket size from the last 7 days of p99 traffic: **100** burst.")
    issues.comment_create(actor=human, issue=i1.identifier, body="Ship it behind a flag first, please.")
    issues.attachment_create(
        actor=a_li, issue=i1.identifier, url="https://example.com/grafana/search-p99", title="Search p99 dashboard"
    )
    invite_create(actor=human, expires_days=7)
    seed_billing(org, human, [a_maya, a_li, a_sam, a_ci])
    return maya, org


def seed_billing(org, human, agents):
    """A month of metering for the billing page: real charged actions, then their ledger
    rows spread over the last 30 days (a picture of a month; the order of rows is kept)."""
    from django.contrib.auth import get_user_model

    from apps.billing.models import LedgerEntry
    from apps.billing.services import billing_cap_set, credit_grant
    from apps.issues import services as issues
    from apps.leases import services as leases

    staff = get_user_model().objects.create_superuser("support@retasc.dev", "support@retasc.dev", "pw-support-1")
    credit_grant(org=org, amount_micros=40_000_000, note="Pilot credit", principal_id=staff.pk)
    for day in range(30):
        for n, actor in enumerate(agents):
            for k in range((day * 7 + n * 3) % 5 + (2 if n == 0 else 1)):
                issues.label_save(actor=actor, name=f"d{day}-{n}-{k}")
                if (day + k) % 3 == 0:
                    leases.next_issue(actor=actor)  # often nothing to claim: a plumbing read
    rows = list(LedgerEntry.objects.filter(org=org, tier__in=["dispatch", "work", "bookkeeping", "plumbing"]).order_by("pk"))
    now, span = timezone.now(), timedelta(days=29, hours=20)
    for i, row in enumerate(rows):
        LedgerEntry.objects.filter(pk=row.pk).update(created_at=now - span * (len(rows) - i) / len(rows))
    billing_cap_set(actor=human, cap_micros=25_000_000)


def test_screenshots(transactional_db, tmp_path):
    from django.test import Client
    from playwright.sync_api import sync_playwright

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    out = Path(OUT)
    out.mkdir(parents=True, exist_ok=True)
    maya, org = seed()
    client = Client()
    client.force_login(maya)
    assert client.get("/queue/").status_code == 200
    cookie = client.cookies["sessionid"].value
    # A (fake) Stripe key so the billing page shows its top-up buttons; nothing is paid.
    server = start_daphne(
        tmp_path, drop_env=("REDIS_URL",), RETASC_EMAIL_VERIFICATION="optional", RETASC_STRIPE_SECRET_KEY="sk_test_screenshots"
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)

            def context(scheme="light", lang="en", width=1440, height=900):
                ctx = browser.new_context(
                    base_url=server.base, viewport={"width": width, "height": height}, color_scheme=scheme, locale="en-US"
                )
                ctx.add_cookies(
                    [
                        {"name": "sessionid", "value": cookie, "url": server.base},
                        {"name": "django_language", "value": lang, "url": server.base},
                    ]
                )
                return ctx

            def shot(page, url, name, full=False):
                page.goto(url)
                page.wait_for_timeout(1200)  # countdowns tick, the socket connects
                page.screenshot(path=str(out / f"{name}.png"), full_page=full)

            page = context().new_page()
            page.goto("/queue/?priority=1")
            page.fill("#filter-save input[name=name]", "urgent")
            page.click("#filter-save button[type=submit]")
            shot(page, "/queue/", "queue")
            shot(page, "/board/", "board")
            page.goto("/queue/")
            page.keyboard.press("?")
            page.wait_for_timeout(300)
            page.screenshot(path=str(out / "queue-shortcuts.png"))
            phone = context(width=390, height=844).new_page()
            shot(phone, "/queue/", "queue-phone")
            shot(phone, "/board/", "board-phone")
            shot(page, "/fleet/", "fleet")
            shot(page, "/fleet/", "fleet-usage", full=True)
            shot(page, "/issues/API-1/", "issue", full=True)
            shot(page, "/org/members/", "members")
            shot(page, "/org/billing/", "billing")
            page.goto("/org/keys/")
            page.fill("#key-mint input[name=label]", "new laptop")
            page.click("#key-mint button[type=submit]")
            page.wait_for_timeout(600)
            page.screenshot(path=str(out / "keys-minted.png"), full_page=True)
            page.goto("/org/invites/")
            page.click("#invite-create button[type=submit]")
            page.wait_for_timeout(600)
            page.screenshot(path=str(out / "invites.png"))
            shot(context("dark").new_page(), "/queue/", "queue-dark")
            shot(context("dark").new_page(), "/issues/API-8/", "issue-review-dark", full=True)
            shot(context(lang="zh-hans").new_page(), "/queue/", "queue-zh-hans")
            shot(context(lang="zh-hans").new_page(), "/board/", "board-zh-hans")
            shot(page, "/org/settings/", "org-settings")
            shot(page, "/nope/", "not-found")
            anon = browser.new_context(base_url=server.base, viewport={"width": 1440, "height": 900}).new_page()
            shot(anon, "/accounts/login/", "sign-in")
            browser.close()
    finally:
        server.stop()
