"""Binding through each provider's signed inbound call, and forged calls refused (401)
with nothing changed."""

from __future__ import annotations

import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.notifications.models import Binding, BindingCode, PendingIntent
from tests.fakes.slack import signed_command


def state():
    return (
        sorted(Binding.objects.values_list("id", "removed_at")),
        sorted(BindingCode.objects.values_list("id", "used_at")),
        PendingIntent.objects.count(),
    )


def test_telegram_start_code_binds_the_chat_and_the_webhook_was_registered_with_a_secret(net):
    hook = net.f.telegram.webhook
    assert hook["url"].endswith(f"/hooks/telegram/{net.telegram.pk}")
    assert hook["secret_token"] == net.telegram.secret and len(hook["secret_token"]) >= 32

    net.bind_telegram(net.w.member, 4242)

    (binding,) = Binding.objects.filter(channel=net.telegram)
    assert binding.user == net.w.member and binding.target == "4242" and binding.label == "@ada"
    assert b"4242" not in bytes(binding.target_enc)  # sealed at rest


def test_slack_connect_binds_the_slack_user(net):
    net.bind_slack(net.w.member, "U777")
    (binding,) = Binding.objects.filter(channel=net.slack)
    assert (binding.user, binding.target) == (net.w.member, "U777")


def test_discord_connect_binds_the_discord_user_and_ping_gets_pong(net):
    net.bind_discord(net.w.member, "9001")
    (binding,) = Binding.objects.filter(channel=net.discord)
    assert (binding.user, binding.target) == (net.w.member, "9001")
    body, headers = net.signer.sign({"type": 1})
    answer = net.http.post(f"/hooks/discord/{net.discord.pk}", body, content_type="application/json", **headers)
    assert answer.json() == {"type": 1}


def test_a_code_is_single_use_and_expires(net, clock):
    code = net.code(net.w.member, net.telegram)
    assert net.telegram_say(1, f"/start {code}").json()["text"].startswith("Connected")
    again = net.telegram_say(2, f"/start {code}").json()["text"]
    assert "unknown, used or expired" in again
    late = net.code(net.w.member, net.telegram)
    clock.advance(minutes=11)
    assert "unknown, used or expired" in net.telegram_say(3, f"/start {late}").json()["text"]
    assert list(Binding.objects.filter(channel=net.telegram).values_list("user_id", flat=True)) == [net.w.member.pk]


def test_forged_telegram_secret_is_refused(net):
    code = net.code(net.w.member, net.telegram)
    before = state()
    answer = net.telegram_say(5, f"/start {code}", secret="not-the-secret")
    assert answer.status_code == 401 and answer.json()["code"] == "UNAUTHORIZED"
    assert state() == before


def test_forged_or_stale_slack_signature_is_refused(net):
    code = net.code(net.w.member, net.slack)
    before = state()
    body, headers = signed_command("wrong-secret", text=f"connect {code}", user_id="U1")
    assert (
        net.http.post(
            f"/hooks/slack/{net.slack.pk}", body, content_type="application/x-www-form-urlencoded", **headers
        ).status_code
        == 401
    )
    # Genuinely signed, but six minutes old: a replay.
    body, headers = signed_command(
        "slack-signing-secret-for-tests", text=f"connect {code}", user_id="U1", stamp=int(time.time()) - 360
    )
    assert (
        net.http.post(
            f"/hooks/slack/{net.slack.pk}", body, content_type="application/x-www-form-urlencoded", **headers
        ).status_code
        == 401
    )
    # Signed, then the body changed.
    body, headers = signed_command("slack-signing-secret-for-tests", text=f"connect {code}", user_id="U1")
    tampered = body.replace(b"U1", b"U2")
    assert (
        net.http.post(
            f"/hooks/slack/{net.slack.pk}", tampered, content_type="application/x-www-form-urlencoded", **headers
        ).status_code
        == 401
    )
    assert state() == before


def test_forged_discord_signature_is_refused(net):
    code = net.code(net.w.member, net.discord)
    before = state()
    answer = net.discord_say("9", "connect", {"code": code}, key=Ed25519PrivateKey.generate())
    assert answer.status_code == 401
    assert state() == before


@pytest.mark.parametrize("kind", ["telegram", "slack", "discord"])
def test_unknown_channel_is_404_and_removed_channel_is_410(net, kind):
    assert net.http.post(f"/hooks/{kind}/not-a-uuid", b"{}", content_type="application/json").status_code == 404
    channel = getattr(net, kind)
    from apps.notifications.services import channel_remove

    channel_remove(actor=net.owner, channel_id=channel.pk)
    assert net.http.post(f"/hooks/{kind}/{channel.pk}", b"{}", content_type="application/json").status_code == 410


def test_an_unbound_sender_is_told_how_to_connect(net):
    answer = net.telegram_say(31337, "status").json()
    assert "not connected" in answer["text"]
