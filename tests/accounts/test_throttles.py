"""Throttles that must not be side-stepped (issue 13, items 4 and 11): the Django admin's
sign-in counts failures like allauth's, and X-Forwarded-For names the client only when a
configured proxy sent it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

from apps.core.clientip import client_ip, parse_proxies
from apps.devices.models import DeviceAuthorization


@pytest.fixture(autouse=True)
def _fresh_counters():
    cache.clear()
    yield
    cache.clear()


# --- 4. the admin sign-in -----------------------------------------------------------------


def test_admin_login_is_throttled_per_account_even_for_the_right_password(db):
    get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "right-pass-123")
    client = Client()
    answers = [
        client.post("/admin/login/", {"username": "staff@retasc.test", "password": f"wrong-{n}"}).status_code for n in range(5)
    ]
    assert answers == [200] * 5  # the form again, "please enter the correct ..."
    # The sixth try is refused before the password is checked: right or wrong, no entry.
    refused = client.post("/admin/login/", {"username": "staff@retasc.test", "password": "right-pass-123"})
    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
    # Another account from elsewhere is not locked out by it.
    get_user_model().objects.create_superuser("other@retasc.test", "other@retasc.test", "other-pass-123")
    ok = Client(REMOTE_ADDR="10.9.9.9").post("/admin/login/", {"username": "other@retasc.test", "password": "other-pass-123"})
    assert ok.status_code == 302


def test_admin_login_is_throttled_per_address_across_accounts(db):
    client = Client()
    answers = [
        client.post("/admin/login/", {"username": f"guess{n}@retasc.test", "password": "nope"}).status_code for n in range(11)
    ]
    assert answers[:10] == [200] * 10 and answers[10] == 429


def test_a_good_admin_login_still_works(db):
    get_user_model().objects.create_superuser("staff@retasc.test", "staff@retasc.test", "right-pass-123")
    client = Client()
    assert client.post("/admin/login/", {"username": "staff@retasc.test", "password": "wrong"}).status_code == 200
    assert client.post("/admin/login/", {"username": "staff@retasc.test", "password": "right-pass-123"}).status_code == 302
    assert client.get("/admin/").status_code == 200


# --- 11. trusted proxies --------------------------------------------------------------------

PROXY = parse_proxies(["10.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    ("remote", "xff", "proxies", "expected"),
    [
        ("203.0.113.7", "1.2.3.4", (), "203.0.113.7"),  # no trusted proxies: header ignored
        ("203.0.113.7", "1.2.3.4", PROXY, "203.0.113.7"),  # sender is not our proxy
        ("10.0.0.5", "198.51.100.9", PROXY, "198.51.100.9"),  # our proxy says who
        ("10.0.0.5", "6.6.6.6, 198.51.100.9", PROXY, "198.51.100.9"),  # a spoofed hop on the left is ignored
        ("10.0.0.5", "198.51.100.9, 10.0.0.7", PROXY, "198.51.100.9"),  # two of our proxies
        ("10.0.0.5", "garbage", PROXY, "10.0.0.5"),  # unreadable: stop at the last trusted hop
        ("::1", "2001:db8::1", PROXY, "2001:db8::1"),
        ("10.0.0.5", "", PROXY, "10.0.0.5"),
    ],
)
def test_client_ip(remote, xff, proxies, expected):
    assert client_ip(remote, xff, proxies) == expected


def test_a_bad_proxy_setting_stops_start_up():
    with pytest.raises(ImproperlyConfigured, match="RETASC_TRUSTED_PROXIES"):
        parse_proxies(["10.0.0.0/8", "not-an-address"])


def _start(client: Client, **headers):
    return client.post("/api/v1/cli/device/start", {"clientName": "t"}, content_type="application/json", **headers)


def test_x_forwarded_for_does_not_bypass_the_device_flow_throttle(db):
    client = Client(REMOTE_ADDR="203.0.113.7")
    answers = [_start(client, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code for n in range(61)]
    assert answers[:60] == [200] * 60 and answers[60] == 429
    assert DeviceAuthorization.objects.count() == 60
    assert set(DeviceAuthorization.objects.values_list("client_ip", flat=True)) == {"203.0.113.7"}


@override_settings(RETASC_TRUSTED_PROXIES=parse_proxies(["10.0.0.1"]))
def test_behind_a_trusted_proxy_each_client_has_its_own_bucket(db):
    proxy = Client(REMOTE_ADDR="10.0.0.1")
    answers = [_start(proxy, HTTP_X_FORWARDED_FOR="198.51.100.1").status_code for _ in range(61)]
    assert answers[60] == 429
    assert _start(proxy, HTTP_X_FORWARDED_FOR="198.51.100.2").status_code == 200  # another client, its own bucket
    assert DeviceAuthorization.objects.filter(client_ip="198.51.100.2").count() == 1


def test_sign_in_throttle_ignores_x_forwarded_for_from_strangers(db):
    client = Client(REMOTE_ADDR="203.0.113.7")
    answers = [
        client.post(
            "/accounts/login/", {"login": f"g{n}@retasc.test", "password": "nope"}, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}"
        ).content
        for n in range(11)
    ]
    # allauth refuses the 11th failed sign-in from one address in a minute (its form says so)
    assert not any(b"Too many failed login attempts" in a for a in answers[:10])
    assert b"Too many failed login attempts" in answers[10]
