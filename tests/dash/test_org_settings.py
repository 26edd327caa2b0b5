"""Org settings for owners: lease length, claim cap, time zone (a receipt; refusals change nothing)."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.issues.models import Activity
from apps.leases import services as leases
from apps.orgs.models import Org
from apps.orgs.services import org_settings_update
from tests.conftest import new_issue


def test_owner_changes_settings_and_dispatch_follows(world):
    org = org_settings_update(actor=world.a, lease_ttl_seconds="120", claim_cap=1, timezone_name="Asia/Shanghai")
    assert (org.lease_ttl_seconds, org.claim_cap, org.timezone) == (120, 1, "Asia/Shanghai")
    receipt = Activity.objects.filter(org=world.org, verb="org_settings_changed").get()
    assert receipt.changes["claimCap"] == [None, 1] and receipt.changes["leaseTtlSeconds"] == [None, 120]
    new_issue(world.a, "one")
    new_issue(world.a, "two")
    from apps.orgs.services import agent_key_authenticate  # a fresh actor sees the new org row

    actor = agent_key_authenticate(world.owner_agent.raw)
    leases.next_issue(actor=actor)
    with pytest.raises(ServiceError) as capped:
        leases.next_issue(actor=actor)
    assert capped.value.code == "CLAIM_CAP"
    org_settings_update(actor=world.a, lease_ttl_seconds="", claim_cap="")  # back to the defaults
    org = Org.objects.get(pk=world.org.pk)
    assert (org.lease_ttl_seconds, org.claim_cap, org.timezone) == (None, None, "Asia/Shanghai")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"lease_ttl_seconds": "2"}, "leaseTtlSeconds"),
        ({"lease_ttl_seconds": "99999999999999999999"}, "leaseTtlSeconds"),
        ({"claim_cap": "0"}, "claimCap"),
        ({"claim_cap": "lots"}, "claimCap"),
        ({"timezone_name": "Mars/Olympus"}, "timezone"),
    ],
)
def test_bad_values_are_refused_and_change_nothing(world, kwargs, field):
    before = Activity.objects.count()
    with pytest.raises(ServiceError) as refused:
        org_settings_update(actor=world.a, **kwargs)
    assert refused.value.code == "INVALID_ARGUMENT" and refused.value.details["field"] == field
    org = Org.objects.get(pk=world.org.pk)
    assert (org.lease_ttl_seconds, org.claim_cap, org.timezone) == (None, None, "UTC") and Activity.objects.count() == before


def test_members_cannot(world):
    with pytest.raises(ServiceError) as refused:
        org_settings_update(actor=world.b, claim_cap=3)
    assert refused.value.code == "FORBIDDEN" and Org.objects.get(pk=world.org.pk).claim_cap is None


def test_the_settings_page(dash):
    page = dash.owner.get("/org/settings/")
    assert page.status_code == 200 and b'id="org-settings"' in page.content
    saved = dash.owner.post("/org/settings/", {"lease_ttl_seconds": "600", "claim_cap": "3", "timezone": "Europe/Berlin"})
    assert saved.status_code == 302
    org = Org.objects.get(pk=dash.w.org.pk)
    assert (org.lease_ttl_seconds, org.claim_cap, org.timezone) == (600, 3, "Europe/Berlin")
    bad = dash.owner.post("/org/settings/", {"lease_ttl_seconds": "1", "claim_cap": "3", "timezone": "Europe/Berlin"})
    assert bad.status_code == 400 and Org.objects.get(pk=dash.w.org.pk).lease_ttl_seconds == 600
    member = dash.member.post("/org/settings/", {"claim_cap": "50", "timezone": "UTC"})
    assert member.status_code in (400, 403) and Org.objects.get(pk=dash.w.org.pk).claim_cap == 3
    assert b'id="org-settings"' not in dash.member.get("/org/settings/").content
