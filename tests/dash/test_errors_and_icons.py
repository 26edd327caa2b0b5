"""Unknown Dash URLs get a styled page (not raw JSON); machines still get JSON; a favicon."""

from __future__ import annotations

from django.test import Client, override_settings


def test_unknown_dash_url_is_a_styled_page_for_people(dash):
    page = dash.owner.get("/nope/", HTTP_ACCEPT="text/html,application/xhtml+xml")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    body = page.content.decode()
    assert 'id="not-found"' in body and "dash.css" in body and "favicon.svg" in body
    anonymous = Client().get("/org/nope/really", HTTP_ACCEPT="text/html")
    assert anonymous.status_code == 404 and b'id="not-found"' in anonymous.content


def test_machines_still_get_json(dash):
    for url in ("/api/v1/nope", "/nope/"):
        answer = dash.owner.get(url, HTTP_ACCEPT="application/json")
        assert answer.status_code == 404 and answer.json()["code"] == "NOT_FOUND"


@override_settings(ROOT_URLCONF="tests.dash.boom_urls", DEBUG=False)
def test_a_server_error_is_a_styled_page_without_details(db):
    browser = Client(raise_request_exception=False)
    page = browser.get("/boom/", HTTP_ACCEPT="text/html")
    assert page.status_code == 500 and b'id="server-error"' in page.content and b"boom" not in page.content
    api = browser.get("/boom/", HTTP_ACCEPT="application/json")
    assert api.status_code == 500 and api.json()["code"] == "INTERNAL"


def test_favicon(dash):
    icon = Client().get("/favicon.ico")
    assert icon.status_code == 301 and icon["Location"].endswith("dash/favicon.svg")
    assert 'rel="icon"' in dash.owner.get("/queue/").content.decode()


def test_task_lists_render_as_read_only_checkboxes():
    from apps.dash.markdown import render

    html = render("- [ ] write it\n- [x] test it\n- plain\n\n<input type=checkbox> [ ] text")
    assert html.count('type="checkbox" disabled') == 2 and html.count("checked") == 1
    assert '<li class="task"><input type="checkbox" disabled aria-label="task"> write it</li>' in html
    assert "<li>plain</li>" in html and "&lt;input" in html  # raw inputs in the source stay text
