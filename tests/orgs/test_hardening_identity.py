"""Hardening of identity (issue 13, items 1, 2, 3 and 10): e-mail squatting, the admin
flag on agent keys, permanent retirement, and throttled self-serve org creation."""

from __future__ import annotations

import re

import pytest
from allauth.account.models import EmailAddress
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialAccount, SocialLogin
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings

from apps.accounts.adapter import SocialAccountAdapter
from apps.devices.models import PersonalToken
from apps.devices.services import personal_token_mint
from apps.leases.revocation import member_reactivate, member_retire, member_suspend
from apps.orgs.models import AgentKey, CreditGrant, Membership, Org
from apps.orgs.services import (
    NEW_ORG_CREDIT_MICROS,
    agent_key_authenticate,
    agent_key_mint,
    bootstrap,
    session_key_mint,
    user_get_or_create,
)
from tests.conftest import make_agent, new_issue

SQUAT = "newhire@corp.example"


def sign_up(client: Client, email: str, password: str = "a-long-pass-123"):
    response = client.post("/accounts/signup/", {"email": email, "password1": password, "password2": password})
    assert response.status_code == 302
    return get_user_model().objects.get(email=email)


def bearer(raw: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


# --- 1. e-mail squatting ------------------------------------------------------------------


def test_a_squatter_added_as_a_member_reads_nothing(world, mailoutbox):
    # Given someone signed up unverified as a future colleague's address, with a CLI token
    squatter_client = Client()
    squatter = sign_up(squatter_client, SQUAT)
    assert not EmailAddress.objects.get(user=squatter).verified
    _, token = personal_token_mint(user=squatter, label="laptop")
    new_issue(world.a, "Secret roadmap")
    # When the operator adds that address as a member
    call_command("add_member", org=world.org.slug, email=SQUAT, stdout=open("/dev/null", "w"))
    assert Membership.objects.get(org=world.org, user=squatter).status == "active"
    # Then the squatter's token and session act in no org, and see no content
    api = Client().get("/api/v1/issues", **bearer(token))
    assert api.status_code == 403 and api.json()["code"] == "FORBIDDEN"
    assert "Verify your e-mail address" in api.json()["message"] and "Secret roadmap" not in api.content.decode()
    page = squatter_client.get("/queue/")
    assert page.status_code == 403 and b"Secret roadmap" not in page.content
    # nor can they mint a key there, or create an org of their own (with its credit)
    mint = Client().post(
        "/api/v1/cli/keys",
        {"runtime": "codex"},
        content_type="application/json",
        **bearer(token),
        HTTP_X_RETASC_ORG=world.org.slug,
    )
    assert mint.status_code == 403
    orgs_before = Org.objects.count()
    made = Client().post("/api/v1/cli/orgs", {"name": "Mine"}, content_type="application/json", **bearer(token))
    assert made.status_code == 403 and Org.objects.count() == orgs_before
    assert not AgentKey.objects.filter(user=squatter).exists()


def test_an_agent_key_of_an_unverified_account_is_refused(world):
    # Given a key minted while the address was verified
    user, _ = user_get_or_create(email="later@acme.test")
    Membership.objects.create(org=world.org, user=user)
    _, raw = agent_key_mint(org=world.org, user=user, project=world.project, runtime="ci")
    assert agent_key_authenticate(raw).principal_id == user.pk
    # When the account's address is no longer verified (it changed to an unverified one)
    EmailAddress.objects.filter(user=user).update(verified=False)
    # Then the key authenticates no more
    assert Client().get("/api/v1/whoami", **bearer(raw)).status_code == 401


def test_operator_created_accounts_are_verified_but_existing_ones_are_not_vouched_for(db):
    created, _ = user_get_or_create(email="Fresh@Corp.Example")
    assert EmailAddress.objects.get(user=created).verified
    squatter = sign_up(Client(), SQUAT)
    again, was_created = user_get_or_create(email=SQUAT)
    assert again == squatter and not was_created
    assert not EmailAddress.objects.get(user=squatter).verified


def _social_login(email: str) -> SocialLogin:
    login = SocialLogin(
        user=get_user_model()(email=email),
        account=SocialAccount(provider="github", uid="4242"),
        email_addresses=[EmailAddress(email=email, verified=True, primary=True)],  # the provider vouches
    )
    return login


@pytest.fixture
def email_authentication_on(monkeypatch):
    # The per-provider switch (SOCIALACCOUNT_EMAIL_AUTHENTICATION is on in settings; no
    # provider app is configured in tests, so its lookup is answered here).
    monkeypatch.setattr(DefaultSocialAccountAdapter, "can_authenticate_by_email", lambda self, login, email: True)


def test_social_login_does_not_auto_connect_to_an_unverified_local_address(db, rf, email_authentication_on):
    squatter = sign_up(Client(), SQUAT)
    _, token = personal_token_mint(user=squatter)
    login = _social_login(SQUAT)
    login.lookup()
    # No takeover: the squatter's account is not handed the victim's social login...
    assert login.user.pk is None and not getattr(login, "_did_authenticate_by_email", None)
    SocialAccountAdapter(rf.get("/")).pre_social_login(rf.get("/"), login)
    assert get_user_model().objects.get(pk=squatter.pk).has_usable_password()
    assert PersonalToken.objects.get(user=squatter).revoked_at is None  # (nothing taken over, nothing to end)
    assert Client().get("/api/v1/cli/me", **bearer(token)).status_code == 200


def test_social_takeover_of_a_verified_account_revokes_its_personal_tokens(db, rf, email_authentication_on):
    owner, _ = user_get_or_create(email="real@corp.example", password="pw-real-123")
    _, token = personal_token_mint(user=owner)
    login = _social_login("real@corp.example")
    login.lookup()
    assert login.user.pk == owner.pk and login._did_authenticate_by_email == "real@corp.example"
    SocialAccountAdapter(rf.get("/")).pre_social_login(rf.get("/"), login)
    assert PersonalToken.objects.get(user=owner).revoked_at is not None
    assert Client().get("/api/v1/cli/me", **bearer(token)).status_code == 401


def test_a_password_reset_revokes_personal_tokens(db, mailoutbox):
    owner, _ = user_get_or_create(email="real@corp.example", password="pw-real-123")
    _, token = personal_token_mint(user=owner)
    _, other = personal_token_mint(user=owner, label="desktop")
    assert Client().get("/api/v1/cli/me", **bearer(token)).status_code == 200
    client = Client()
    assert client.post("/accounts/password/reset/", {"email": "real@corp.example"}).status_code == 302
    link = re.search(r"https?://[^/\s]+(/accounts/password/reset/key/\S+/)", mailoutbox[-1].body).group(1)
    form = client.get(link, follow=True)
    done = client.post(form.redirect_chain[-1][0], {"password1": "brand-new-pass-9", "password2": "brand-new-pass-9"})
    assert done.status_code == 302
    assert PersonalToken.objects.filter(user=owner, revoked_at__isnull=True).count() == 0
    for raw in (token, other):
        assert Client().get("/api/v1/cli/me", **bearer(raw)).status_code == 401


# --- 2. the admin flag on agent keys ------------------------------------------------------


def test_new_keys_are_not_admin_but_the_bootstrap_key_is(db):
    result = bootstrap(org_name="Ops", prefix="OPS", email="ops@corp.example", password=None, runtime="ci", lease_ttl=None)
    boot = agent_key_authenticate(result["agentKey"])
    assert boot.key.admin is True
    org = Org.objects.get(slug="ops")
    minted, _ = agent_key_mint(org=org, user=boot.key.user, project=boot.project, runtime="codex")
    assert minted.admin is False
    session, _ = session_key_mint(actor=boot)
    assert session.admin is True  # identical access to its parent


@pytest.mark.parametrize("tool", [member_suspend, member_retire, member_reactivate])
def test_member_tools_need_an_admin_key(world, tool, unchanged):
    plain = make_agent(world.org, world.owner, world.project, label="plain owner key")
    assert plain.actor.is_owner and not plain.actor.key.admin
    statuses = list(Membership.objects.order_by("pk").values_list("status", flat=True))
    with unchanged():
        with pytest.raises(Exception) as refused:
            tool(actor=plain.actor, member_id=world.member.email)
    assert refused.value.code == "FORBIDDEN" and "admin key" in refused.value.message
    assert list(Membership.objects.order_by("pk").values_list("status", flat=True)) == statuses
    assert AgentKey.objects.get(pk=world.member_agent.actor.key.pk).revoked_at is None


def test_member_tools_over_http_and_export_need_an_admin_key(world):
    plain = make_agent(world.org, world.owner, world.project, label="plain owner key")
    refused = Client().post(
        f"/api/v1/members/{world.member.email}/suspend", {}, content_type="application/json", **bearer(plain.raw)
    )
    assert refused.status_code == 403 and refused.json()["code"] == "FORBIDDEN"
    assert Membership.objects.get(org=world.org, user=world.member).status == "active"
    export = Client().get("/api/v1/export", **bearer(plain.raw))
    assert export.status_code == 403 and export.json()["code"] == "FORBIDDEN"
    assert Client().get("/api/v1/export", **bearer(world.owner_agent.raw)).status_code == 200
    # A human owner in the CLI or the browser acts with their own role.
    _, token = personal_token_mint(user=world.owner)
    assert Client().get("/api/v1/export", **bearer(token)).status_code == 200


def test_rotation_keeps_the_flag_and_the_keys_page_shows_it(world):
    from apps.leases.revocation import agent_key_rotate

    new_key, _ = agent_key_rotate(key=world.owner_agent.actor.key)
    assert new_key.admin is True
    plain = make_agent(world.org, world.owner, world.project, label="plain owner key")
    client = Client()
    client.force_login(world.owner)
    html = client.get("/org/keys/").content.decode()
    rows = dict(re.findall(r'<tr data-key="([^"]+)".*?<td class="key-admin">(.*?)</td>', html, re.S))
    assert "admin" in rows[new_key.prefix] and "admin" not in rows[plain.actor.key.prefix]


# --- 3. retiring is permanent -------------------------------------------------------------


def test_retiring_is_permanent(world):
    member_retire(actor=world.a, member_id=world.member.email)
    for tool in (member_reactivate, member_suspend):
        with pytest.raises(Exception) as refused:
            tool(actor=world.a, member_id=world.member.email)
        assert refused.value.code == "CONFLICT" and "permanent" in refused.value.message
    assert Membership.objects.get(org=world.org, user=world.member).status == "retired"
    r = Client().post(
        f"/api/v1/members/{world.member.email}/reactivate", {}, content_type="application/json", **bearer(world.owner_agent.raw)
    )
    assert r.status_code == 409 and Membership.objects.get(org=world.org, user=world.member).status == "retired"
    # and the Dash offers no way back
    client = Client()
    client.force_login(world.owner)
    membership = Membership.objects.get(org=world.org, user=world.member)
    assert f"/org/members/{membership.pk}/reactivate/" not in client.get("/org/members/").content.decode()
    assert client.post(f"/org/members/{membership.pk}/reactivate/").status_code == 409
    assert Membership.objects.get(pk=membership.pk).status == "retired"


# --- 10. self-serve org creation ----------------------------------------------------------


@override_settings(RETASC_ORG_CREATE_PER_HOUR=3)
def test_org_creation_is_throttled_per_person_and_credit_is_granted_once(db):
    person, _ = user_get_or_create(email="maker@corp.example")
    _, token = personal_token_mint(user=person)
    made = []
    for n in range(3):
        r = Client().post("/api/v1/cli/orgs", {"name": f"Org {n}"}, content_type="application/json", **bearer(token))
        assert r.status_code == 201
        made.append(Org.objects.get(slug=r.json()["slug"]))
    balances = [o.balance_micros for o in Org.objects.filter(pk__in=[o.pk for o in made]).order_by("created_at")]
    assert balances == [NEW_ORG_CREDIT_MICROS, 0, 0]
    assert CreditGrant.objects.filter(email="maker@corp.example").count() == 1
    before = Org.objects.count()
    r = Client().post("/api/v1/cli/orgs", {"name": "One too many"}, content_type="application/json", **bearer(token))
    assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED"
    assert Org.objects.count() == before
    # Another person is not throttled by the first, and gets their own credit.
    other, _ = user_get_or_create(email="other@corp.example")
    _, other_token = personal_token_mint(user=other)
    r = Client().post("/api/v1/cli/orgs", {"name": "Theirs"}, content_type="application/json", **bearer(other_token))
    assert r.status_code == 201 and Org.objects.get(slug=r.json()["slug"]).balance_micros == NEW_ORG_CREDIT_MICROS
