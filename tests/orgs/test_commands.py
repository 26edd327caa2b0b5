"""Operator commands (SPEC §14) through call_command: --json shapes, idempotence, errors."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.issues.models import Claim, Issue
from apps.leases import services as leases
from apps.orgs.models import AgentKey, Membership, Org, Project
from apps.orgs.services import agent_key_authenticate
from tests.conftest import new_issue


def run(*args) -> dict:
    out = StringIO()
    call_command(*args, "--json", stdout=out)
    text = out.getvalue().strip()
    assert "\n" not in text  # one JSON object on one line
    return json.loads(text)


def refused(unchanged, *args) -> str:
    """The command fails with one clear sentence and changes nothing."""
    with unchanged(), pytest.raises(CommandError) as caught:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    message = str(caught.value)
    assert message and "\n" not in message and "Traceback" not in message, message
    assert message.rstrip(")").rstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ_:").rstrip(" (").endswith("."), message
    return message


BOOT = ("bootstrap", "--org", "Demo Co", "--project", "demo", "--email", "Ada@Example.com", "--password", "pw-ada-123")


# --- bootstrap -------------------------------------------------------------------------


def test_bootstrap_json_prints_exactly_the_spec_keys(db):
    result = run(*BOOT)
    base = settings.PUBLIC_URL
    assert set(result) == {"org", "project", "email", "agentKey", "mcpUrl", "apiUrl"}
    assert {k: v for k, v in result.items() if k != "agentKey"} == {
        "org": "demo-co",
        "project": "DEMO",
        "email": "ada@example.com",
        "mcpUrl": f"{base}/mcp",
        "apiUrl": f"{base}/api/v1/",
    }
    assert result["agentKey"].startswith("rtsc_")
    # the key works, for the owner, in the project
    actor = agent_key_authenticate(result["agentKey"])
    assert (actor.org.slug, actor.project.prefix, actor.is_owner, actor.runtime) == ("demo-co", "DEMO", True, "claude-code")
    # the key is stored only as its hash
    assert not AgentKey.objects.filter(secret_hash=result["agentKey"]).exists()


def test_bootstrap_is_idempotent_and_mints_a_new_key_each_time(db):
    first = run(*BOOT)
    second = run(*BOOT)
    assert (second["org"], second["project"], second["email"]) == (first["org"], first["project"], first["email"])
    assert second["agentKey"] != first["agentKey"]
    assert Org.objects.filter(slug="demo-co").count() == 1
    assert Project.objects.filter(org__slug="demo-co").count() == 1
    assert Membership.objects.filter(org__slug="demo-co").count() == 1
    # both keys work
    assert agent_key_authenticate(first["agentKey"]).principal_id == agent_key_authenticate(second["agentKey"]).principal_id


def test_bootstrap_reuse_key_answers_the_kept_key_until_it_stops_working(db, settings, tmp_path):
    """`make run` passes --reuse-key: one demo key across runs, not a new live key per run."""
    from apps.leases.revocation import agent_key_revoke

    settings.DATA_DIR = tmp_path
    first = run(*BOOT, "--reuse-key")
    kept = next((tmp_path / "bootstrap-keys").iterdir())
    assert kept.read_text().strip() == first["agentKey"] and kept.stat().st_mode & 0o777 == 0o600
    keys = AgentKey.objects.count()
    again = run(*BOOT, "--reuse-key")
    assert again["agentKey"] == first["agentKey"] and AgentKey.objects.count() == keys
    assert set(again) == set(first)  # the same SPEC keys, nothing added
    fresh = run(*BOOT, "--reuse-key", "--new-key")
    assert fresh["agentKey"] != first["agentKey"] and kept.read_text().strip() == fresh["agentKey"]
    # a revoked kept key is replaced, never handed out
    agent_key_revoke(key=agent_key_authenticate(fresh["agentKey"]).key)
    replaced = run(*BOOT, "--reuse-key")
    assert replaced["agentKey"] not in (first["agentKey"], fresh["agentKey"])
    assert agent_key_authenticate(replaced["agentKey"]).org.slug == "demo-co"
    # without --reuse-key, bootstrap mints a new key every time (SPEC §14)
    assert run(*BOOT)["agentKey"] != replaced["agentKey"]


def test_bootstrap_human_output_says_when_the_key_is_the_kept_one(db, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    call_command(*BOOT, "--reuse-key", stdout=StringIO())
    out = StringIO()
    call_command(*BOOT, "--reuse-key", stdout=out)
    assert "the same key as last run" in out.getvalue()


def test_bootstrap_reuses_the_org_and_adds_a_project(db):
    run(*BOOT)
    result = run("bootstrap", "--org", "Demo Co", "--project", "OPS", "--email", "ada@example.com", "--password", "x")
    assert (result["org"], result["project"]) == ("demo-co", "OPS")
    assert sorted(Project.objects.filter(org__slug="demo-co").values_list("prefix", flat=True)) == ["DEMO", "OPS"]


def test_bootstrap_sets_the_lease_ttl_and_runtime(db):
    result = run(*BOOT, "--lease-ttl", "90", "--runtime", "codex")
    assert Org.objects.get(slug="demo-co").lease_ttl_seconds == 90
    assert agent_key_authenticate(result["agentKey"]).runtime == "codex"


def test_bootstrap_human_output_shows_the_key_once(db):
    out = StringIO()
    call_command(*BOOT, stdout=out)
    key = AgentKey.objects.get()
    assert key.prefix in out.getvalue()
    assert "demo-co" in out.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ("--project", "1X"),
        ("--project", "A"),
        ("--project", "TOOLONGPREFIX"),
        ("--email", "not-an-email"),
        ("--lease-ttl", "1"),
        ("--runtime", "bad runtime!"),
    ],
)
def test_bootstrap_refuses_bad_values_in_one_sentence(db, unchanged, args):
    base = dict(zip(BOOT[1::2], BOOT[2::2], strict=True))
    base[args[0]] = args[1]
    flat = [part for pair in base.items() for part in pair]
    orgs = Org.objects.count()
    refused(unchanged, "bootstrap", *flat)
    assert Org.objects.count() == orgs
    assert AgentKey.objects.count() == 0


# --- mint_key --------------------------------------------------------------------------


def test_mint_key_json(world):
    result = run("mint_key", "--org", world.org.slug, "--email", world.member.email, "--runtime", "cursor", "--label", "laptop")
    assert list(result) == ["agentKey"]
    actor = agent_key_authenticate(result["agentKey"])
    assert (actor.principal_id, actor.org.pk, actor.project.prefix, actor.runtime, actor.key.label) == (
        world.member.pk,
        world.org.pk,
        "ACME",
        "cursor",
        "laptop",
    )


def test_mint_key_for_a_named_project(world):
    from apps.orgs.services import project_create

    project_create(org=world.org, prefix="OPS")
    result = run("mint_key", "--org", world.org.slug, "--email", world.owner.email, "--project", "ops")
    assert agent_key_authenticate(result["agentKey"]).project.prefix == "OPS"


@pytest.mark.parametrize("which", ["org", "email", "project", "outsider", "runtime"])
def test_mint_key_refusals(world, unchanged, which):
    args = {"--org": world.org.slug, "--email": world.member.email}
    if which == "org":
        args["--org"] = "no-such-org"
    elif which == "email":
        args["--email"] = "nobody@nowhere.test"
    elif which == "project":
        args["--project"] = "NOPE"
    elif which == "outsider":
        args["--email"] = world.outsider.email
    else:
        args["--runtime"] = "!!"
    keys = AgentKey.objects.count()
    message = refused(unchanged, "mint_key", *[p for pair in args.items() for p in pair])
    assert AgentKey.objects.count() == keys
    if which == "org":
        assert message == "There is no org 'no-such-org'."


# --- add_member ------------------------------------------------------------------------


def test_add_member(world):
    result = run("add_member", "--org", world.org.slug, "--email", "New@Acme.test")
    membership = Membership.objects.get(org=world.org, user__email="new@acme.test")
    assert result == {"org": world.org.slug, "email": "new@acme.test", "role": "member", "memberId": membership.pk}
    # idempotent; a second run can change the role
    again = run("add_member", "--org", world.org.slug, "--email", "new@acme.test", "--role", "owner")
    assert (again["memberId"], again["role"]) == (membership.pk, "owner")
    assert Membership.objects.filter(org=world.org, user__email="new@acme.test").count() == 1


def test_add_member_to_a_missing_org(db, unchanged):
    assert refused(unchanged, "add_member", "--org", "ghost", "--email", "a@b.test") == "There is no org 'ghost'."


def test_add_member_with_a_bad_email(world, unchanged):
    refused(unchanged, "add_member", "--org", world.org.slug, "--email", "nope")


# --- reclaim_expired -------------------------------------------------------------------


def test_reclaim_expired_command(world, clock):
    new_issue(world.a, "T")
    leases.next_issue(actor=world.a)
    assert run("reclaim_expired") == {"reclaimed": 0, "escalated": 0}
    clock.advance(minutes=31)
    assert run("reclaim_expired") == {"reclaimed": 1, "escalated": 0}
    issue = Issue.objects.get()
    assert (issue.status, issue.reclaim_count, issue.lease_claim_id) == ("todo", 1, None)
    assert Claim.objects.get().end_reason == "expired"
    assert run("reclaim_expired") == {"reclaimed": 0, "escalated": 0}
