"""The device flow's rules, service by service (no server)."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.core.errors import ServiceError
from apps.devices import services
from apps.devices.models import DeviceAuthorization, PersonalToken
from apps.devices.services import DevicePollRefusal


def _poll(raw, clock=None):
    if clock is not None:
        clock.advance(seconds=10)
    return services.device_poll(device_code=raw)


def test_pending_then_approved_delivers_one_token_once(world, clock):
    device, raw = services.device_start(client_name="retasc CLI on box")
    assert len(device.user_code) == 8 and set(device.user_code) <= set(services.USER_CODE_ALPHABET)
    with pytest.raises(DevicePollRefusal) as pending:
        _poll(raw, clock)
    assert (pending.value.code, pending.value.http_status) == ("AUTHORIZATION_PENDING", 428)
    services.device_approve(user_code=services.user_code_display(device.user_code).lower(), user=world.owner)
    token, secret = _poll(raw, clock)
    assert secret.startswith(token.prefix + "_") and token.user == world.owner and token.label == "retasc CLI on box"
    assert PersonalToken.objects.get().secret_hash != secret  # stored hashed
    with pytest.raises(DevicePollRefusal) as used:
        _poll(raw, clock)
    assert used.value.code == "EXPIRED_TOKEN"
    assert services.personal_token_authenticate(secret) == token
    assert services.personal_token_revoke(token=token) is True
    with pytest.raises(ServiceError):
        services.personal_token_authenticate(secret)


def test_denied_expired_and_too_fast(world, clock):
    device, raw = services.device_start(client_name="x")
    services.device_deny(user_code=device.user_code, user=world.owner)
    with pytest.raises(DevicePollRefusal) as denied:
        _poll(raw, clock)
    assert denied.value.code == "ACCESS_DENIED"
    with pytest.raises(ServiceError):  # a decided code cannot be approved afterwards
        services.device_approve(user_code=device.user_code, user=world.owner)

    fast, raw_fast = services.device_start(client_name="y")
    with pytest.raises(DevicePollRefusal):
        _poll(raw_fast, clock)
    with pytest.raises(DevicePollRefusal) as slow:
        _poll(raw_fast)  # no time passed
    assert slow.value.code == "SLOW_DOWN" and slow.value.details["interval"] == fast.interval + services.SLOW_DOWN_STEP

    late, raw_late = services.device_start(client_name="z")
    clock.advance(minutes=11)
    with pytest.raises(DevicePollRefusal) as expired:
        _poll(raw_late)
    assert expired.value.code == "EXPIRED_TOKEN"
    assert DeviceAuthorization.objects.get(pk=late.pk).status == "expired"
    with pytest.raises(DevicePollRefusal):
        services.device_poll(device_code="rtscdev_unknown")


def test_poll_endpoint_answers_the_flow_codes(world):
    client = Client()
    start = client.post("/api/v1/cli/device/start", {"clientName": "retasc CLI on box"}, content_type="application/json").json()
    assert set(start) == {"deviceCode", "userCode", "verificationUri", "verificationUriComplete", "interval", "expiresIn"}
    assert start["verificationUriComplete"].endswith(f"/device/?code={start['userCode']}") and start["expiresIn"] == 600
    r = client.post("/api/v1/cli/device/poll", {"deviceCode": start["deviceCode"]}, content_type="application/json")
    assert r.status_code == 428 and r.json()["code"] == "AUTHORIZATION_PENDING"


def test_device_page_needs_sign_in(world):
    r = Client().get("/device/", {"code": "BCDF-GHJK"})
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]
    browser = Client()
    browser.force_login(world.owner)
    bad = browser.get("/device/", {"code": "BCDF-GHJK"})
    assert bad.status_code == 404 and b"not valid or has expired" in bad.content


def test_personal_token_acts_as_the_human_on_the_api(world):
    _, raw = services.personal_token_mint(user=world.member)
    client = Client()
    who = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}").json()
    assert who["principal"]["email"] == world.member.email and who["runtime"] == "cli" and who["key"] is None
    other = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}", HTTP_X_RETASC_ORG=world.other_org.slug)
    assert other.status_code == 404  # not a member there
    bad = client.get("/api/v1/whoami", HTTP_AUTHORIZATION="Bearer rtscpat_nope_nope")
    assert bad.status_code == 401 and bad.json()["code"] == "UNAUTHORIZED"
    # Agent keys still work, and cannot use the human endpoints.
    assert client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {world.member_agent.raw}").status_code == 200
    assert client.get("/api/v1/cli/keys", HTTP_AUTHORIZATION=f"Bearer {world.member_agent.raw}").status_code == 401
