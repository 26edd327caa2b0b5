"""Accounts glue (settings from the environment, usernames, invite sign-up) and the
staff admin's content reveal receipt."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from apps.accounts import config
from apps.issues.models import Activity
from apps.orgs.models import Membership
from apps.orgs.services import invite_create


def test_email_verification_choices(monkeypatch):
    monkeypatch.delenv("RETASC_EMAIL_VERIFICATION", raising=False)
    assert config.email_verification() == "optional"
    monkeypatch.setenv("RETASC_EMAIL_VERIFICATION", "Mandatory")
    assert config.email_verification() == "mandatory"
    monkeypatch.setenv("RETASC_EMAIL_VERIFICATION", "sometimes")
    with pytest.raises(ImproperlyConfigured, match="none, optional or mandatory"):
        config.email_verification()


def test_email_backend_console_unless_smtp_configured(monkeypatch):
    for name in ("EMAIL_URL", "EMAIL_HOST"):
        monkeypatch.delenv(name, raising=False)
    assert config.email_settings()["EMAIL_BACKEND"].endswith("console.EmailBackend")
    monkeypatch.setenv("EMAIL_URL", "smtps://bot%40x.dev:s3cret@mail.x.dev")
    got = config.email_settings()
    assert got["EMAIL_BACKEND"].endswith("smtp.EmailBackend")
    assert (got["EMAIL_HOST"], got["EMAIL_PORT"], got["EMAIL_HOST_USER"], got["EMAIL_USE_SSL"]) == (
        "mail.x.dev",
        465,
        "bot@x.dev",
        True,
    )
    monkeypatch.setenv("EMAIL_URL", "http://nope")
    with pytest.raises(ImproperlyConfigured):
        config.email_settings()


def test_social_providers_only_when_configured(monkeypatch, tmp_path):
    for name in ("GITHUB_CLIENT_ID", "GITHUB_CLIENT_SECRET", "GOOGLE_CLIENT_ID", "GOOGLE_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    assert config.social_providers() == ([], {})
    secret = tmp_path / "gh"
    secret.write_text("shh\n")
    monkeypatch.setenv("GITHUB_CLIENT_ID", "abc")
    monkeypatch.setenv("GITHUB_CLIENT_SECRET_FILE", str(secret))
    apps, providers = config.social_providers()
    assert apps == ["allauth.socialaccount.providers.github"]
    assert providers["github"]["APPS"][0] == {"client_id": "abc", "secret": "shh", "key": ""}
    monkeypatch.setenv("GOOGLE_CLIENT_ID", "only-half")
    with pytest.raises(ImproperlyConfigured, match="together"):
        config.social_providers()


def confirm_email_from_outbox(client, mailbox, address):
    """Open the confirmation link allauth mailed to ``address`` (what the person does)."""
    import re

    mail = [m for m in mailbox if address in m.to][-1]
    link = re.search(r"https?://[^/\s]+(/accounts/confirm-email/[^\s]+/)", mail.body).group(1)
    assert client.post(link).status_code == 302


def test_sign_up_uses_lowercased_email_as_username_and_bootstraps_an_org_once_verified(db, mailoutbox):
    client = Client()
    response = client.post(
        "/accounts/signup/", {"email": "New.Person@Example.COM", "password1": "a-long-pass-123", "password2": "a-long-pass-123"}
    )
    assert response.status_code == 302
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(email="new.person@example.com")
    assert user.username == "new.person@example.com"
    # Unverified: no org yet, and the page says how to verify.
    page = client.get("/queue/")
    assert page.status_code == 403 and b"Verify your e-mail address new.person@example.com" in page.content
    assert not Membership.objects.filter(user=user).exists()
    confirm_email_from_outbox(client, mailoutbox, "new.person@example.com")
    assert client.get("/queue/", follow=True).status_code == 200
    assert Membership.objects.get(user=user).role == "owner"


def test_invite_sign_up_joins_the_org_instead_of_bootstrapping(world, mailoutbox):
    _, code = invite_create(actor=world.a, expires_days=2)
    client = Client()
    page = client.get(f"/invite/{code}/")
    assert page.status_code == 200 and b"invite-signup" in page.content
    client.post(
        "/accounts/signup/", {"email": "joiner@example.com", "password1": "a-long-pass-123", "password2": "a-long-pass-123"}
    )
    assert client.get("/queue/")["Location"] == f"/invite/{code}/"  # the pending invite comes first
    refused = client.post(f"/invite/{code}/")  # not before the address is verified; the code is not used up
    assert refused.status_code == 403 and not Membership.objects.filter(user__email="joiner@example.com").exists()
    confirm_email_from_outbox(client, mailoutbox, "joiner@example.com")
    joined = client.post(f"/invite/{code}/")
    assert joined.status_code == 302 and joined["Location"] == "/queue/"
    assert list(Membership.objects.filter(user__email="joiner@example.com").values_list("org_id", "role")) == [
        (world.org.pk, "member")
    ]
    assert client.post(f"/invite/{code}/").status_code == 404  # single use


def test_admin_reveal_records_a_content_revealed_receipt(world):
    from django.contrib.auth import get_user_model

    from apps.issues.chain import verify_org
    from tests.conftest import new_issue

    issue = new_issue(world.a, "Sealed title", body="sealed body")
    staff = get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "pw")
    client = Client()
    client.force_login(staff)
    listing = client.get("/admin/issues/issue/")
    assert listing.status_code == 200 and b"Sealed title" not in listing.content
    detail = client.get(f"/admin/issues/issue/{issue.pk}/change/")
    assert b"sealed body" not in detail.content
    before = Activity.objects.filter(verb="content_revealed").count()
    response = client.post("/admin/issues/issue/", {"action": "reveal_content", "_selected_action": [str(issue.pk)]})
    assert response.status_code == 200
    assert b"Sealed title" in response.content and b"sealed body" in response.content
    receipt = Activity.objects.filter(verb="content_revealed").get()
    assert before == 0 and receipt.issue_id == issue.pk and receipt.runtime == "admin" and receipt.principal_id == staff.pk
    world.org.refresh_from_db()
    assert verify_org(world.org) is None
