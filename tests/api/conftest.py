"""HTTP API fixtures: clients for the personas of ``world`` (see tests/conftest.py)."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient


def client(raw: str | None = None, **kwargs) -> APIClient:
    c = APIClient(**kwargs)
    if raw:
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()  # throttle history lives in the cache
    yield
    cache.clear()


@pytest.fixture
def owner(world) -> APIClient:
    return client(world.owner_agent.raw)


@pytest.fixture
def member(world) -> APIClient:
    return client(world.member_agent.raw)


@pytest.fixture
def outsider(world) -> APIClient:
    return client(world.outsider_agent.raw)


def create(c: APIClient, title="Task", **fields) -> dict:
    fields.setdefault("work", True)
    if "blockedBy" not in fields:
        fields.setdefault("noDependency", "independent")
    r = c.post("/api/v1/issues", {"title": title, **fields}, format="json")
    assert r.status_code == 201, r.content
    return r.json()
