"""Deleting an org (crypto-shred) from the Dash (owners, typed confirmation) and from the
admin (staff, typed confirmation): the key file is gone and the content unreadable."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.core import crypto, keystore
from apps.issues.models import Issue
from apps.orgs.models import Membership, Org
from tests.conftest import new_issue


def _sealed_rows(org):
    """What a database backup taken before the deletion would hold."""
    return list(Issue.objects.filter(org_id=org.pk).values_list("pk", "title_enc"))


def _assert_shredded(org_id, sealed):
    ref = str(org_id)
    assert not (keystore.keystore_dir() / f"{ref}.key").exists()
    assert not Org.objects.filter(pk=org_id).exists() and not Issue.objects.filter(org_id=org_id).exists()
    keystore.clear_cache()  # a fresh process: nothing left in memory either
    with pytest.raises(crypto.IntegrityError):
        keystore.data_key(ref)
    # The backed-up ciphertext stays what it was: bytes no one can open any more.
    assert sealed and all(b"Launch plan" not in bytes(enc) for _, enc in sealed)


def test_an_owner_deletes_the_org_in_the_dash_after_typing_its_slug(tworld):
    org = tworld.org
    new_issue(tworld.a, "Launch plan", body="the secret launch date")
    sealed = _sealed_rows(org)
    client = Client()
    client.force_login(tworld.owner)
    page = client.get("/org/delete/")
    assert page.status_code == 200 and f'data-confirm-text="{org.slug}"'.encode() in page.content
    # A wrong confirmation deletes nothing.
    wrong = client.post("/org/delete/", {"confirm": "nope"})
    assert wrong.status_code == 400 and Org.objects.filter(pk=org.pk).exists()
    assert (keystore.keystore_dir() / f"{org.pk}.key").exists()
    done = client.post("/org/delete/", {"confirm": org.slug})
    assert done.status_code == 302
    _assert_shredded(org.pk, sealed)
    # The other org is untouched.
    assert Issue.objects.filter(org_id=tworld.other_org.pk).count() == 0
    assert (keystore.keystore_dir() / f"{tworld.other_org.pk}.key").exists()


def test_members_and_agent_keys_cannot_delete_the_org(tworld):
    client = Client()
    client.force_login(tworld.member)
    assert client.get("/org/delete/").status_code == 403
    assert client.post("/org/delete/", {"confirm": tworld.org.slug}).status_code == 403
    from apps.issues.services import org_delete_as

    with pytest.raises(Exception) as refused:
        org_delete_as(actor=tworld.a, confirmation=tworld.org.slug)  # the owner's admin agent key
    assert refused.value.code == "FORBIDDEN"
    assert Org.objects.filter(pk=tworld.org.pk).exists() and (keystore.keystore_dir() / f"{tworld.org.pk}.key").exists()


def test_staff_delete_an_org_in_the_admin_with_a_typed_confirmation(tworld):
    org = tworld.org
    new_issue(tworld.a, "Launch plan")
    sealed = _sealed_rows(org)
    staff = get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "pw-staff-1")
    client = Client()
    client.force_login(staff)
    listing = client.get("/admin/orgs/org/").content.decode()
    assert "shred_orgs" in listing and "delete_selected" not in listing
    ask = client.post("/admin/orgs/org/", {"action": "shred_orgs", "_selected_action": [str(org.pk)]})
    assert ask.status_code == 200 and f"Type <code>{org.slug}</code>".encode() in ask.content
    wrong = client.post(
        "/admin/orgs/org/", {"action": "shred_orgs", "_selected_action": [str(org.pk)], "shred": "1", "confirm": "acme"}
    )
    assert wrong.status_code == 200 and b"did not match" in wrong.content and Org.objects.filter(pk=org.pk).exists()
    done = client.post(
        "/admin/orgs/org/", {"action": "shred_orgs", "_selected_action": [str(org.pk)], "shred": "1", "confirm": org.slug}
    )
    assert done.status_code == 302
    _assert_shredded(org.pk, sealed)
    assert not Membership.objects.filter(org_id=org.pk).exists()
