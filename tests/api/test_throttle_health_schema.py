"""Rate limiting, health, and the OpenAPI document with its docs page."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client, override_settings
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from apps.api.views import ROUTES
from retasc import __version__
from tests.api.conftest import client

# --- throttling -------------------------------------------------------------------------


@override_settings(RETASC_API_RATE="3/min")
def test_rate_limit_per_key_answers_429_with_retry_after(world, owner, member, unchanged):
    for _ in range(3):
        assert owner.get("/api/v1/whoami").status_code == 200
    with unchanged():
        r = owner.post("/api/v1/issues", {"title": "t", "work": True, "noDependency": "x"}, format="json")
    assert r.status_code == 429
    assert r.json()["code"] == "RATE_LIMITED"
    assert 1 <= int(r["Retry-After"]) <= 60
    assert r.json()["retryAfterSeconds"] == int(r["Retry-After"])
    assert member.get("/api/v1/whoami").status_code == 200  # another key has its own budget


@override_settings(RETASC_API_RATE="2/min")
def test_rate_limit_per_session_user(world):
    c = APIClient()
    c.force_login(world.member)
    assert [c.get("/api/v1/whoami").status_code for _ in range(3)] == [200, 200, 429]
    assert client(world.owner_agent.raw).get("/api/v1/whoami").status_code == 200


@override_settings(RETASC_API_RATE="1/min")
def test_anonymous_requests_are_refused_before_throttling(world):
    assert [APIClient().get("/api/v1/whoami").status_code for _ in range(3)] == [401, 401, 401]


# --- health -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_health_ok():
    r = Client().get("/api/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["version"] == __version__
    assert r.json()["checks"]["database"] == "ok"


@pytest.mark.django_db
@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_health_503_when_redis_is_unreachable():
    r = Client().get("/api/health")
    assert r.status_code == 503
    assert r.json()["status"] == "unavailable"
    assert r.json()["checks"] == {"database": "ok", "redis": "unavailable"}


@pytest.mark.django_db
def test_health_503_when_the_database_fails(monkeypatch):
    def broken():
        raise RuntimeError("database is down")

    monkeypatch.setattr(connection, "cursor", broken)
    r = Client().get("/api/health")
    assert r.status_code == 503
    assert r.json()["checks"]["database"] == "unavailable"


# --- schema and docs --------------------------------------------------------------------


@pytest.fixture
def openapi(db):
    r = Client().get("/api/schema/", {"format": "json"})
    assert r.status_code == 200
    return r.json()


def test_schema_is_valid_openapi_with_operation_ids(openapi):
    validate_schema(openapi)
    assert openapi["openapi"] == "3.1.0"
    ops = [op for item in openapi["paths"].values() for op in item.values() if isinstance(op, dict) and "responses" in op]
    ids = [op["operationId"] for op in ops]
    assert len(ids) == len(set(ids))
    mine = {op.operation_id for _, methods in ROUTES.values() for op in methods.values()}
    assert mine | {"download_attachment", "upload_attachment_file"} <= set(ids)
    ops = [op for op in ops if op["operationId"] in mine]
    assert {"list_issues", "create_issue", "update_issue", "next_issue", "claim_issue", "upload_attachment_file"} <= set(ids)
    assert all(p.startswith("/api/v1/") for p in openapi["paths"])
    assert {"agentKey", "session"} <= set(openapi["components"]["securitySchemes"])
    create = openapi["paths"]["/api/v1/issues"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["title", "work"] and body["additionalProperties"] is False
    assert create["responses"]["201"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Issue"}
    for op in ops:
        for status, response in op["responses"].items():
            if status.startswith("4"):
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_schema_needs_no_authentication_and_serves_yaml(db):
    r = Client().get("/api/schema/")
    assert r.status_code == 200 and b"openapi: 3.1.0" in r.content


def test_docs_page_uses_bundled_assets_only(db):
    r = Client().get("/api/docs/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "unpkg" not in html.lower()
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert Client().get("/api/redoc/").status_code == 200


def test_rate_limiter_store_down_fails_open(owner, settings):
    """Redis (the limiter's store) being down must not stop the work loop."""
    # Changing CACHES through the settings fixture rebuilds the cache handlers.
    settings.CACHES = {
        "default": {
            "BACKEND": "apps.core.cache.SharedRedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens on the discard port
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    from django.core.cache import cache

    with pytest.raises(Exception):  # noqa: B017 - any client error proves the store is down
        cache.get("probe")
    answer = owner.get("/api/v1/whoami")
    assert answer.status_code == 200, answer.content
    assert answer.json()["org"]["slug"].startswith("acme")


def test_lost_database_answers_json_503_unavailable(owner, monkeypatch):
    """A database outage inside an API call is a retryable JSON refusal, not HTML."""
    from django.db import OperationalError

    from apps.tools import operations

    def down(*args, **kwargs):
        raise OperationalError("sorry, too many clients already")

    monkeypatch.setattr(operations, "queue_status", down)
    answer = owner.get("/api/v1/queue")
    assert answer.status_code == 503
    assert answer["Retry-After"] == "1"
    assert answer.json() == {"code": "UNAVAILABLE", "message": "The database is unavailable; retry shortly.", "retryable": True}
