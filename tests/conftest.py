"""Shared personas and helpers.

- ``world``: org "acme" (project ACME) with an owner and a member, each with an agent
  key (the owner's has the admin flag); org "globex" with its own owner (the outsider).
- ``clock``: a controllable ``timezone.now`` for lease expiry and SLA tests.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.utils import timezone

from apps.orgs.services import (
    agent_key_authenticate,
    agent_key_mint,
    member_add,
    org_create,
    project_create,
    user_get_or_create,
)

_counter = itertools.count(1)


def make_org(name: str, prefix: str, owner_email: str):
    owner, _ = user_get_or_create(email=owner_email, password="pw-owner-1")
    org = org_create(name=name, owner=owner)
    project = project_create(org=org, prefix=prefix)
    return org, project, owner


def make_agent(org, user, project, runtime="claude-code", label="", admin=False):
    """An agent actor for ``user`` (authenticated through a real minted key)."""
    _, raw = agent_key_mint(org=org, user=user, project=project, runtime=runtime, label=label, admin=admin)
    actor = agent_key_authenticate(raw)
    return SimpleNamespace(actor=actor, raw=raw, user=user)


def build_world():
    n = next(_counter)
    org, project, owner = make_org(f"Acme {n}", "ACME", f"owner{n}@acme.test")
    member, _ = user_get_or_create(email=f"member{n}@acme.test", password="pw-member-1")
    member_add(org=org, user=member)
    other, other_project, outsider = make_org(f"Globex {n}", "GLX", f"owner{n}@globex.test")
    w = SimpleNamespace(
        org=org,
        project=project,
        owner=owner,
        member=member,
        other_org=other,
        other_project=other_project,
        outsider=outsider,
    )
    # The owner's key is an admin key, like the operator's bootstrap key (member tools,
    # export); tests of the flag mint their own plain owner key.
    w.owner_agent = make_agent(org, owner, project, admin=True)
    w.member_agent = make_agent(org, member, project, runtime="codex")
    w.outsider_agent = make_agent(other, outsider, other_project)
    w.a = w.owner_agent.actor
    w.b = w.member_agent.actor
    w.x = w.outsider_agent.actor
    return w


@pytest.fixture
def world(db):
    return build_world()


@pytest.fixture
def tworld(transactional_db):
    """The same personas for tests that need real commits (threads, live servers)."""
    return build_world()


def new_issue(actor, title="Task", **kwargs):
    from apps.issues.services import issue_create

    kwargs.setdefault("work", True)
    if "blocked_by" not in kwargs:
        kwargs.setdefault("no_dependency", "independent")
    return issue_create(actor=actor, title=title, **kwargs)


@pytest.fixture
def issue_factory(world):
    return lambda title="Task", actor=None, **kw: new_issue(actor or world.a, title, **kw)


class Clock:
    def __init__(self, monkeypatch):
        self.now = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: self.now)

    def advance(self, **delta):
        self.now += timedelta(**delta)
        return self.now


@pytest.fixture
def clock(monkeypatch):
    return Clock(monkeypatch)


def snapshot():
    """Everything a refusal must leave unchanged: row counts and issue state."""
    from apps.billing.models import LedgerEntry
    from apps.issues.models import Activity, Attachment, Checkpoint, Claim, Comment, Issue, Relation

    issues = sorted(
        Issue.objects.values_list(
            "id",
            "status",
            "priority",
            "assignee_id",
            "lease_claim_id",
            "lease_expires_at",
            "reclaim_count",
            "title_enc",
            "body_enc",
            "checkpoint_id",
            "effective_rank",
            "evidence_enc",
        )
    )
    counts = {m.__name__: m.objects.count() for m in (Activity, Attachment, Checkpoint, Comment, Relation, Claim, LedgerEntry)}
    return issues, counts


@pytest.fixture
def unchanged():
    """``with unchanged(): ...`` asserts the block changed nothing in the database."""
    from contextlib import contextmanager

    @contextmanager
    def check():
        before = snapshot()
        yield
        assert snapshot() == before

    return check


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def _database_is_postgres() -> bool:
    from django.conf import settings

    return "postgresql" in settings.DATABASES["default"]["ENGINE"]


needs_postgres = pytest.mark.skipif(
    not _database_is_postgres(), reason="needs PostgreSQL: run with DATABASE_URL (make test-postgres)"
)
