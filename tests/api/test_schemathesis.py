"""Property-based tests generated from /api/schema/ (schemathesis): for generated input on
every operation the API never answers 5xx, every 4xx carries a ``code``, and answers
match the documented schemas and status codes. Bounded: a few examples per operation.
"""

from __future__ import annotations

from contextlib import contextmanager

import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance
from schemathesis.config import SchemathesisConfig

from tests.api.conftest import client, create

# Loaded at import: building the document touches no database.
# Coverage phase off (hundreds of boundary cases per operation): examples + a few fuzzed cases.
CONFIG = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}, "generation": {"max-examples": 4}})
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application(), config=CONFIG)


@contextmanager
def db_connection_kept():
    # Requests go straight into the WSGI app in this thread, inside the test's transaction.
    # Like Django's test client, keep the connection open across the request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def every_refusal_has_a_code(ctx, response, case):
    if 400 <= response.status_code < 500:
        body = response.json()
        assert isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"], (
            f"{response.status_code} without a code: {response.text[:200]}"
        )


CHECKS = [not_a_server_error, every_refusal_has_a_code, response_schema_conformance, status_code_conformance]


# The main endpoints: the work loop, issues, comments, relations, labels, attachments.
MAIN = (
    "list_issues",
    "create_issue",
    "update_issue",
    "get_issue",
    "next_issue",
    "next_batch",
    "claim_issue",
    "heartbeat",
    "checkpoint",
    "release_issue",
    "check_claim",
    "get_activity",
    "save_comment",
    "retract_comment",
    "add_relation",
    "remove_relation",
    "save_label",
    "save_attachment",
    "upload_attachment_file",
    "queue_status",
)


@schema.include(operation_id=list(MAIN)).parametrize()
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_generated_requests(case, world):
    owner = client(world.owner_agent.raw)
    if not owner.get("/api/v1/issues/ACME-1").status_code == 200:
        create(owner, "Fixture one")
        create(owner, "Fixture two")
    with db_connection_kept():
        response = case.call(headers={"Authorization": f"Bearer {world.owner_agent.raw}"})
    case.validate_response(response, checks=CHECKS)
