"""Dash personas: an owner and a member of org A (acme), an outsider owning org B.

Each persona is a signed-in ``Client`` whose session already points at its org.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.test import Client

from tests.conftest import new_issue
from tests.dash.live import chromium, start


def signed_in(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def dash(world):
    """Clients for owner / member / outsider / anonymous plus an issue in each org."""
    issue_a = new_issue(world.a, "Fix the login bug", body="Steps:\n\n1. open\n2. **fail**", priority=2)
    issue_b = new_issue(world.x, "Globex secret plan", body="classified")
    return SimpleNamespace(
        w=world,
        owner=signed_in(world.owner),
        member=signed_in(world.member),
        outsider=signed_in(world.outsider),
        anon=Client(),
        issue_a=issue_a,
        issue_b=issue_b,
    )


@pytest.fixture
def server(transactional_db, tmp_path):
    """A live Daphne on the test database for one test (tests.dash.live.start)."""
    srv = start(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module (the browser tests: tests.dash.live)."""
    with chromium() as browser:
        yield browser
