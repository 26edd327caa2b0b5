"""The Imports page in a real browser (Playwright driving Debian's Chromium) against a live
Daphne: a beads file uploaded and followed live to the end over the websocket (no reload),
a bad file's one-sentence error with nothing written, and placeholder people on the
members page: the mark, no keys offered, an owner's merge; a member's "This is me".
"""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from apps.intake.models import ImportJob
from apps.issues.models import Issue
from apps.orgs.models import Membership
from tests.cli.test_import_cli import beads_lines
from tests.dash.live import browser_marks, expect, signed_in_page, start

pytestmark = browser_marks()


def _jobs():
    return ImportJob.objects


@pytest.fixture
def browser_for(tworld, tmp_path, browser):
    """``browser_for(user)`` gives a page signed in as ``user`` on one live server."""
    # Imports run on the server's own thread, so the page watches one in progress (the
    # in-memory channel layer of tests.dash.live.start carries its events).
    server = start(tmp_path, RETASC_INPROCESS_JOBS="true")
    try:

        def make(user):
            page = signed_in_page(browser, server, user, first_page="/org/members/")
            page.set_default_timeout(30_000)
            page.on("dialog", lambda dialog: dialog.accept())  # data-confirm questions
            return page

        yield make
    finally:
        server.stop()


def _upload(page, name: str, text: str, source: str):
    page.goto("/org/imports/")
    page.select_option("#file-form select[name=source]", source)
    page.set_input_files("#file-form input[name=file]", {"name": name, "mimeType": "application/json", "buffer": text.encode()})
    page.click("#file-form button[type=submit]")


def test_file_import_finishes_live(tworld, browser_for):
    page = browser_for(tworld.owner)
    _upload(page, "issues.jsonl", beads_lines(300), "beads")
    page.wait_for_url("**/org/imports/*/")
    live = page.locator("#import-live")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")
    first = live.get_attribute("data-status")
    page.evaluate("window.stayedOnPage = true")  # gone if the page reloaded
    expect(live).to_have_attribute("data-status", "done", timeout=120_000)
    assert page.evaluate("window.stayedOnPage") is True
    assert first in ("queued", "running"), first  # it moved while the page watched
    expect(live.locator("[data-count=issues]")).to_have_text("300")
    expect(live.locator("#import-summary")).to_be_visible()
    assert Issue.objects.filter(org=tworld.org).count() == 300

    page.goto("/org/imports/")
    expect(page.locator("#imports-table tbody tr")).to_have_count(1)
    expect(page.locator("#imports-table .import-done")).to_be_visible()


def test_bad_file_shows_one_sentence_and_writes_nothing(tworld, browser_for):
    page = browser_for(tworld.owner)
    before = (Issue.objects.count(), _jobs().count())
    _upload(page, "broken.jsonl", '{"id": "bd-1", "title": "fine"}\n{"id": "bd-2", "title": \n', "beads")
    expect(page.locator("#error")).to_contain_text("INVALID_ARGUMENT")
    assert (Issue.objects.count(), _jobs().count()) == before
    # The Linear key is never put back into a page, whatever the answer.
    page.goto("/org/imports/")
    page.fill("#linear-form input[name=api_key]", "lin_api_not_a_real_key")
    page.fill("#linear-form input[name=teams]", "not a team!")
    page.click("#linear-form button[type=submit]")
    page.wait_for_load_state()
    assert "lin_api_not_a_real_key" not in page.content()


def test_placeholder_mark_merge_and_claim(tworld, browser_for):
    from apps.orgs.services import placeholder_get_or_create

    ada = placeholder_get_or_create(org=tworld.org, provider="linear", login="ada", name="Ada L", email=tworld.member.email)
    bob = placeholder_get_or_create(org=tworld.org, provider="beads", login="bob")
    owner = browser_for(tworld.owner)
    owner.goto("/org/members/")
    row = owner.locator(f"#members-table tr[data-member='{bob.user.email}']")
    expect(row.locator(".placeholder-badge")).to_have_text("imported")
    expect(row).to_contain_text("placeholder")
    expect(row.get_by_role("button", name="Suspend")).to_have_count(0)
    owner.goto("/org/keys/")  # never offered a key
    assert bob.user.email not in owner.locator("select[name=member]").inner_html()

    owner.goto("/org/members/")
    row = owner.locator(f"#members-table tr[data-member='{bob.user.email}']")
    row.locator("select[name=into]").select_option(label=tworld.owner.email)
    row.get_by_role("button", name="Merge into…").click()
    expect(owner.locator(".alert.success")).to_contain_text(f"Merged the placeholder into {tworld.owner.email}.")
    assert not Membership.objects.filter(pk=bob.pk, status=Membership.Status.PLACEHOLDER).exists()

    member = browser_for(tworld.member)
    member.goto("/org/members/")
    row = member.locator(f"#members-table tr[data-member='{ada.user.email}']")
    row.get_by_role("button", name="This is me").click()
    expect(member.locator(".alert.success")).to_contain_text("Claimed")
    assert not Membership.objects.filter(pk=ada.pk, status=Membership.Status.PLACEHOLDER).exists()


# --- the same pages without a browser (Django's test client) --------------------------------


def test_imports_pages_are_for_owners(tworld):
    member = Client()
    member.force_login(tworld.member)
    assert member.get("/org/members/").status_code == 200
    assert "/org/imports/" not in member.get("/org/members/").content.decode()  # no tab
    assert member.get("/org/imports/").status_code == 403
    upload = SimpleUploadedFile("issues.jsonl", beads_lines(2).encode())
    assert member.post("/org/imports/file/", {"source": "beads", "file": upload}).status_code == 403
    assert _jobs().count() == 0 and Issue.objects.filter(org=tworld.org).count() == 0

    owner = Client()
    owner.force_login(tworld.owner)
    page = owner.get("/org/imports/").content.decode()
    assert 'href="/org/imports/"' in page and 'id="linear-form"' in page and 'type="password" name="api_key"' in page


def test_linear_form_runs_the_import_and_never_echoes_the_key(tworld, settings):
    from tests.fakes.linear import FakeLinear, LinearData

    fake = FakeLinear(LinearData.generate(teams=("ENG",), issues_per_team=5)).start()
    # The import runs to the end inside the request (no runner thread, no worker).
    settings.RETASC_LINEAR_API_URL, settings.RETASC_INPROCESS_JOBS, settings.REDIS_URL = fake.api_url, False, ""
    try:
        owner = Client()
        owner.force_login(tworld.owner)
        refused = owner.post("/org/imports/linear/", {"api_key": "lin_api_wrong", "teams": "ENG"})
        assert refused.status_code == 400 and "INVALID_ARGUMENT" in refused.content.decode()
        assert "lin_api_wrong" not in refused.content.decode() and _jobs().count() == 0

        done = owner.post("/org/imports/linear/", {"api_key": fake.api_key, "teams": "eng"})
        assert done.status_code == 302
        job = _jobs().get()
        assert done["Location"] == f"/org/imports/{job.pk}/"
        page = owner.get(done["Location"]).content.decode()
        assert 'data-status="done"' in page and 'data-count="issues">5<' in page
        assert fake.api_key not in page and fake.api_key not in done.content.decode()
        assert job.secret_enc is None and fake.mutations == 0
        assert Issue.objects.filter(org=tworld.org, project__prefix="ENG").count() == 5
    finally:
        fake.stop()
