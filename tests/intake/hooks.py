"""Signed deliveries for the intake tests: payloads from tests/fixtures/, signed the way
each provider signs them, POSTed to /hooks/<provider>/<connectorId>."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import uuid
from functools import cache
from pathlib import Path

from django.test import Client

from apps.intake.connectors import connector_create
from apps.orgs.services import actor_for_human

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@cache
def _load(provider: str, name: str) -> dict:
    return json.loads((FIXTURES / provider / f"{name}.json").read_text())


def payload(provider: str, name: str) -> dict:
    return copy.deepcopy(_load(provider, name))


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github(connector: dict, event: str, data: dict, *, delivery: str | None = None, signature: str | None = None, client=None):
    body = json.dumps(data).encode()
    headers = {
        "HTTP_X_GITHUB_EVENT": event,
        "HTTP_X_GITHUB_DELIVERY": delivery or str(uuid.uuid4()),
        "HTTP_X_HUB_SIGNATURE_256": signature if signature is not None else sign(connector["secret"], body),
    }
    return (client or Client()).post(
        f"/hooks/github/{connector['connectorId']}", data=body, content_type="application/json", **headers
    )


def gitlab(connector: dict, event: str, data: dict, *, delivery: str | None = None, token: str | None = None, client=None):
    body = json.dumps(data).encode()
    headers = {
        "HTTP_X_GITLAB_EVENT": event,
        "HTTP_X_GITLAB_EVENT_UUID": delivery or str(uuid.uuid4()),
        "HTTP_X_GITLAB_TOKEN": token if token is not None else connector["secret"],
    }
    return (client or Client()).post(
        f"/hooks/gitlab/{connector['connectorId']}", data=body, content_type="application/json", **headers
    )


def connect(world, *, provider="github", repo="octocat/Hello-World", api_url=None, token=None, pr_sync=False, org=None):
    """A connector of ``world.org`` (or ``org``) created by its owner, as the API answers it."""
    org = org or world.org
    owner = world.owner if org == world.org else world.outsider
    actor = actor_for_human(user=owner, org=org)
    prefix = world.project.prefix if org == world.org else world.other_project.prefix
    return connector_create(
        actor=actor, provider=provider, project=prefix, repo=repo, token=token, api_url=api_url, pr_sync=pr_sync
    )
