"""``/metrics``: Prometheus text (SPEC §16).

Access: with ``RETASC_METRICS_TOKEN`` set, only ``Authorization: Bearer <token>``. Unset,
only a direct loopback client: the socket peer is 127.0.0.1 or ::1 *and* the request
carries no forwarding header. Behind a proxy on the same machine every request arrives
from loopback, so a forwarded request never passes this rule (set the token instead);
``X-Forwarded-For`` is never trusted to say where a request came from.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from apps.core import metrics
from apps.core.clientip import FORWARDED_MARK
from apps.issues.models import CLOSED, DISPATCHABLE, Issue, Relation
from apps.ops.asgi import observe_db_pool
from apps.orgs.models import Org, Project

_LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
_FORWARDING = ("HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED")


def _refusal(status: int, code: str, message: str) -> JsonResponse:
    response = JsonResponse({"code": code, "message": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="retasc-metrics"'
    return response


def _allowed(request) -> JsonResponse | None:
    """None when the scraper may read; else the refusal to answer."""
    token = settings.RETASC_METRICS_TOKEN
    if token:
        given = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
            return None
        return _refusal(401, "UNAUTHORIZED", "Missing or wrong metrics token.")
    forwarded = request.META.get(FORWARDED_MARK) or any(request.META.get(h) for h in _FORWARDING)
    local = request.META.get("REMOTE_ADDR") in _LOOPBACK and not forwarded
    if local:
        return None
    return _refusal(403, "FORBIDDEN", "Metrics are served to loopback only; set RETASC_METRICS_TOKEN to scrape from elsewhere.")


def metrics_view(request):
    if request.method != "GET":
        return _refusal(405, "METHOD_NOT_ALLOWED", "Use GET.")
    refused = _allowed(request)
    if refused is not None:
        return refused
    observe_db_pool()
    return HttpResponse(metrics.exposition(QueueDepth()), content_type=metrics.CONTENT_TYPE)


def _in(values) -> str:
    # Fixed enum values from the models, never user input.
    return ", ".join(f"'{getattr(v, 'value', v)}'" for v in values)


class QueueDepth:
    """``retasc_queue_issues{org, project, state}``, counted by one SQL query at scrape time.

    - ready: work that dispatch may hand out now (open dispatchable status, not awaiting
      triage, lease free or expired, no open blocker), in any lane;
    - held: work under a live lease;
    - awaiting_triage: open work waiting for a human's triage.
    """

    def collect(self):
        issue_t, rel_t = Issue._meta.db_table, Relation._meta.db_table
        project_t, org_t = Project._meta.db_table, Org._meta.db_table
        blocked = (
            f"EXISTS (SELECT 1 FROM {rel_t} r JOIN {issue_t} s ON s.id = r.source_id"
            f" WHERE r.target_id = i.id AND r.type = 'blocks' AND s.status NOT IN ({_in(CLOSED)}))"
        )
        sql = (
            "SELECT o.slug, p.prefix,"
            f" SUM(CASE WHEN i.status IN ({_in(DISPATCHABLE)}) AND NOT i.awaiting_triage"
            f" AND (i.lease_expires_at IS NULL OR i.lease_expires_at <= %s) AND NOT {blocked} THEN 1 ELSE 0 END),"
            " SUM(CASE WHEN i.lease_expires_at > %s THEN 1 ELSE 0 END),"
            " SUM(CASE WHEN i.awaiting_triage THEN 1 ELSE 0 END)"
            f" FROM {project_t} p JOIN {org_t} o ON o.id = p.org_id"
            f" LEFT JOIN {issue_t} i ON i.project_id = p.id AND i.work AND i.status NOT IN ({_in(CLOSED)})"
            " WHERE o.deleted_at IS NULL GROUP BY o.slug, p.prefix ORDER BY o.slug, p.prefix"
        )
        now = Issue._meta.get_field("lease_expires_at").get_db_prep_value(timezone.now(), connection)
        with connection.cursor() as cur:
            cur.execute(sql, [now, now])
            rows = cur.fetchall()
        family = GaugeMetricFamily(
            "retasc_queue_issues",
            "Work issues per project by queue state (ready, held, awaiting_triage).",
            labels=["org", "project", "state"],
        )
        for slug, prefix, ready, held, triage in rows:
            family.add_metric([slug, prefix, "ready"], ready or 0)
            family.add_metric([slug, prefix, "held"], held or 0)
            family.add_metric([slug, prefix, "awaiting_triage"], triage or 0)
        yield family
