"""Every model has an admin page staff can open; secrets never appear on it."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model

from apps.intake.connectors import connector_create
from apps.intake.models import Connector
from apps.orgs.services import actor_for_human, invite_create

OUR_APPS = {"orgs", "issues", "leases", "billing", "devices", "intake"}


def test_every_model_of_ours_is_registered():
    missing = [
        f"{m._meta.app_label}.{m.__name__}"
        for m in apps.get_models()
        if m._meta.app_label in OUR_APPS and not m._meta.auto_created and m not in admin.site._registry
    ]
    assert missing == []


@pytest.mark.parametrize(
    "model",
    [
        "orgs/org",
        "orgs/agentkey",
        "orgs/invite",
        "orgs/projectalias",
        "issues/issue",
        "issues/activity",
        "billing/ledgerentry",
        "intake/connector",
        "intake/delivery",
        "intake/writebackjob",
    ],
)
def test_staff_can_open_the_changelists_and_no_secret_shows(world, client, model):
    staff = get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "pw-staff-1")
    _, code = invite_create(actor=actor_for_human(user=world.owner, org=world.org))
    connector_create(
        actor=actor_for_human(user=world.owner, org=world.org),
        provider="github",
        project="ACME",
        repo="octocat/Hello-World",
        token="ghp_admin_must_not_show",
    )
    client.force_login(staff)
    page = client.get(f"/admin/{model}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert code not in html and world.owner_agent.raw not in html
    for connector in Connector.objects.all():
        assert connector.secret not in html and connector.token not in html
        detail = client.get(f"/admin/intake/connector/{connector.pk}/change/").content.decode()
        assert connector.secret not in detail and connector.token not in detail
