"""/metrics: who may read it, what it counts, and what its labels never hold."""

from __future__ import annotations

import json
import re

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from apps.core import logs
from apps.issues.models import Issue
from apps.leases.tasks import reclaim_expired_task
from apps.ops.asgi import route_of
from apps.ops.views import QueueDepth
from retasc.celery import app as celery_app
from tests.conftest import new_issue
from tests.ops.conftest import ROOT, start_daphne

TOKEN = "metrics-token-for-tests-0123456789"


def samples(text: str) -> dict:
    """{(name, frozenset(labels)): value} of a Prometheus text answer."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def value(text: str, name: str, **labels) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def scrape(client, **extra) -> str:
    r = client.get("/metrics", **extra)
    assert r.status_code == 200, r.content
    assert r["Content-Type"].startswith("text/plain")
    return r.content.decode()


def agent(raw: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


# --- who may read -----------------------------------------------------------------------


@pytest.mark.django_db
def test_without_a_token_only_a_direct_loopback_client_reads(client, settings):
    settings.RETASC_METRICS_TOKEN = ""
    assert "retasc_queue_issues" in scrape(client, REMOTE_ADDR="127.0.0.1")
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    for extra in (
        {"REMOTE_ADDR": "10.1.2.3"},
        {"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "127.0.0.1"},
        # A proxy on this machine connects from loopback: a forwarded request is not local.
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_REAL_IP": "203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_FORWARDED": "for=203.0.113.9"},
    ):
        r = client.get("/metrics", **extra)
        assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN"), extra
        assert b"retasc_" not in r.content
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


@pytest.mark.django_db
def test_with_a_token_only_the_bearer_of_it_reads(client, settings):
    settings.RETASC_METRICS_TOKEN = TOKEN
    for extra in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": f"Basic {TOKEN}"}):
        r = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **extra)
        assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")
        assert r["WWW-Authenticate"].startswith("Bearer")
    assert "retasc_" in scrape(client, REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


# --- what it counts -----------------------------------------------------------------------


def test_claims_releases_reclaims_and_refusals_are_counted(tworld, client, clock):
    before = scrape(client)
    owner, member = agent(tworld.owner_agent.raw), agent(tworld.member_agent.raw)
    new_issue(tworld.a, "First")
    token = owner.post("/api/v1/work/next", {}, format="json").json()["claimToken"]
    r = member.post("/api/v1/issues/ACME-1/claim", {}, format="json")
    assert (r.status_code, r.json()["code"]) == (409, "HELD")
    assert owner.post("/api/v1/issues/ACME-1/release", {"claimToken": token}, format="json").status_code == 200
    assert owner.post("/api/v1/work/next", {}, format="json").status_code == 200
    clock.advance(seconds=tworld.org.lease_ttl + 1)
    assert member.post("/api/v1/work/next", {}, format="json").json()["issue"]["identifier"] == "ACME-1"  # reclaims
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("retasc_claims_total") == 3
    assert delta("retasc_releases_total") == 1
    assert delta("retasc_reclaims_total") == 1
    assert delta("retasc_refusals_total", interface="api", code="HELD") == 1


def test_queue_depth_per_project_is_one_query_at_scrape_time(tworld, client, django_assert_num_queries):
    new_issue(tworld.a, "Ready 1")
    new_issue(tworld.a, "Ready 2")
    new_issue(tworld.a, "Blocked", blocked_by=["ACME-1"])
    new_issue(tworld.a, "Triage", awaiting_triage=True)
    held = new_issue(tworld.a, "Held").identifier
    assert agent(tworld.owner_agent.raw).post(f"/api/v1/issues/{held}/claim", {}, format="json").status_code == 200
    assert Issue.objects.filter(awaiting_triage=True).count() == 1

    with django_assert_num_queries(1):
        families = list(QueueDepth().collect())
    depth = {tuple(s.labels.values()): s.value for s in families[0].samples}
    slug, other = tworld.org.slug, tworld.other_org.slug
    assert {k: v for k, v in depth.items() if k[0] in (slug, other)} == {
        (slug, "ACME", "ready"): 2,
        (slug, "ACME", "held"): 1,
        (slug, "ACME", "awaiting_triage"): 1,
        (other, "GLX", "ready"): 0,
        (other, "GLX", "held"): 0,
        (other, "GLX", "awaiting_triage"): 0,
    }
    assert value(scrape(client), "retasc_queue_issues", org=slug, project="ACME", state="ready") == 2


@celery_app.task(name="tests.ops.failing_job_task")
def failing_job_task():
    raise RuntimeError("a job that fails")


@celery_app.task(name="tests.ops.request_id_job_task")
def request_id_job_task():
    return logs.request_id.get()


@pytest.mark.django_db
def test_job_runs_and_failures_are_counted_and_tasks_carry_the_request_id(client):
    before = scrape(client)
    assert reclaim_expired_task.apply().state == "SUCCESS"
    assert failing_job_task.apply().state == "FAILURE"
    assert request_id_job_task.apply(headers={"retasc_request_id": "req-from-publisher"}).get() == "req-from-publisher"
    after = scrape(client)
    assert (
        value(after, "retasc_job_runs_total", job="reclaim_expired")
        - value(before, "retasc_job_runs_total", job="reclaim_expired")
        == 1
    )
    assert value(after, "retasc_job_failures_total", job="reclaim_expired") == value(
        before, "retasc_job_failures_total", job="reclaim_expired"
    )
    assert (
        value(after, "retasc_job_failures_total", job="failing_job")
        - value(before, "retasc_job_failures_total", job="failing_job")
        == 1
    )
    assert logs.request_id.get() == ""  # reset after each task


def test_route_labels_are_url_patterns_never_paths():
    assert route_of("/api/v1/issues/ACME-12") == "/api/v1/issues/<str:identifier>"
    assert route_of("/api/v1/uploads/eyJzZWNyZXQiOnRydWV9:1abc") == "/api/v1/uploads/<str:token>"
    assert route_of("/invite/rtscinv_secretpart/") == "/invite/<str:code>/"
    assert route_of("/api/nothing/rtsc_key_in_path") == "unmatched"
    assert route_of("/mcp") == "/mcp"
    assert route_of("/static/dash/app.css") == "/static/"
    assert route_of("/metrics") == "/metrics"


# --- several processes ---------------------------------------------------------------------


@pytest.mark.slow
def test_live_servers_share_metrics_in_multiprocess_mode(tworld, tmp_path):
    """Two Daphne processes, one metrics directory: a scrape of either sees both."""
    shared = tmp_path / "prom"
    shared.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared), "RETASC_METRICS_TOKEN": TOKEN}
    new_issue(tworld.a, "Visible")
    invite_code = "rtscinv_NotARealCodeButSecretShaped"
    servers = [start_daphne(tmp_path, **env), start_daphne(tmp_path, **env)]
    key = tworld.owner_agent.raw
    try:
        for server in servers:
            with httpx2.Client(base_url=server.base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
                assert http.get("/api/v1/issues/ACME-1").status_code == 200
                assert http.get(f"/invite/{invite_code}/").status_code in (200, 302, 404)
                r = http.post(
                    "/mcp",
                    headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"},
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": "get_issue", "arguments": {"identifier": "ACME-404"}},
                    },
                )
                assert r.status_code == 200 and json.loads(r.json()["result"]["content"][0]["text"])["code"] == "NOT_FOUND"
                assert len(r.headers["x-request-id"]) == 32
        with httpx2.Client(base_url=servers[1].base, timeout=30) as http:
            assert http.get("/metrics").status_code == 401
            r = http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    finally:
        for server in servers:
            server.stop()
    assert r.status_code == 200
    text = r.text
    assert value(text, "retasc_http_requests_total", route="/api/v1/issues/<str:identifier>", method="GET", status="200") == 2
    assert value(text, "retasc_http_requests_total", route="/mcp", method="POST", status="200") == 2
    assert value(text, "retasc_mcp_tool_calls_total", tool="get_issue", outcome="refused") == 2
    assert value(text, "retasc_refusals_total", interface="mcp", code="NOT_FOUND") == 2
    assert value(text, "retasc_http_request_duration_seconds_count", route="/mcp", method="POST") == 2
    for secret in ("ACME-1", "ACME-404", invite_code, key, TOKEN):
        assert secret not in text


@pytest.mark.django_db
def test_the_grafana_dashboard_charts_only_metrics_that_exist(client):
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "retasc.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    charted = {re.sub(r"_(total|bucket|count|sum)$", "", name) for e in exprs for name in re.findall(r"retasc_[a-z_]+", e)}
    served = {family.name for family in text_string_to_metric_families(scrape(client))}
    assert charted and charted <= served, charted - served
