"""The API endpoints, the add_channel command and the Dash pages: wiring and permissions.
Every refusal also checks that nothing was written."""

from __future__ import annotations

import json
from datetime import timedelta

from django.core.management import call_command
from django.test import Client

from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.notifications.delivery import deliver_due
from apps.notifications.models import Binding, BindingCode, Channel, Delivery, Webhook
from tests.conftest import new_issue
from tests.fakes.webhook_receiver import FakeReceiver


def rows():
    return Channel.objects.count(), Webhook.objects.count(), BindingCode.objects.count(), Binding.objects.count()


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_api_channels_owner_only_tokens_sealed_and_never_shown(world, fakes):
    owner, member = browser(world.owner), browser(world.member)
    body = {"kind": "telegram", "botToken": fakes.telegram.token}
    before = rows()
    refused = member.post("/api/v1/notifications/channels", body, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "FORBIDDEN"
    agent = Client().post(
        "/api/v1/notifications/channels",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {world.owner_agent.raw}",
    )
    assert agent.status_code == 403
    bad = owner.post("/api/v1/notifications/channels", {"kind": "pigeon"}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["field"] == "kind"
    assert rows() == before

    made = owner.post("/api/v1/notifications/channels", body, content_type="application/json")
    assert made.status_code == 201
    answer = made.json()
    assert set(answer) == {"channelId", "webhookUrl"}
    assert answer["webhookUrl"].endswith(f"/hooks/telegram/{answer['channelId']}")
    channel = Channel.objects.get()
    assert fakes.telegram.token.encode() not in bytes(channel.bot_token_enc)
    listed = member.get("/api/v1/notifications/channels").json()["channels"]
    assert [c["kind"] for c in listed] == ["telegram"]
    assert fakes.telegram.token not in json.dumps(listed)


def test_telegram_refusing_the_webhook_leaves_no_channel(world, fakes):
    fakes.telegram.fail_next(1, 401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
    answer = browser(world.owner).post(
        "/api/v1/notifications/channels", {"kind": "telegram", "botToken": fakes.telegram.token}, content_type="application/json"
    )
    assert answer.status_code == 503 and fakes.telegram.token not in answer.content.decode()
    assert Channel.objects.count() == 0


def test_api_me_bindings_gives_a_code_and_email_binds_the_verified_address(net):
    member = browser(net.w.member)
    answer = member.post("/api/v1/me/bindings", {"channelId": str(net.telegram.pk)}, content_type="application/json")
    assert answer.status_code == 201 and answer.json()["code"].startswith("rtscbind_")
    assert net.telegram_say(5, f"/start {answer.json()['code']}").json()["text"].startswith("Connected")

    # A person acts in an org only with a verified address (SPEC §2), so e-mail binds it at once.
    bound = member.post("/api/v1/me/bindings", {"channelId": str(net.email.pk)}, content_type="application/json")
    assert bound.status_code == 201 and Binding.objects.filter(channel=net.email).count() == 1
    listed = member.get("/api/v1/me/bindings").json()["bindings"]
    assert sorted(b["kind"] for b in listed) == ["email", "telegram"]

    gone = member.delete(f"/api/v1/me/bindings/{listed[0]['bindingId']}")
    assert gone.status_code == 204
    assert browser(net.w.owner).delete(f"/api/v1/me/bindings/{listed[1]['bindingId']}").status_code == 404  # not theirs
    assert len(member.get("/api/v1/me/bindings").json()["bindings"]) == 1


def test_personal_token_agents_cannot_bind(world, fakes, net):
    answer = Client().post(
        "/api/v1/me/bindings",
        {"channelId": str(net.telegram.pk)},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {world.member_agent.raw}",
    )
    assert answer.status_code == 403 and BindingCode.objects.count() == 0


def test_api_webhooks_and_redeliver(net):
    owner = browser(net.w.owner)
    with FakeReceiver() as receiver:
        made = owner.post(
            "/api/v1/notifications/webhooks", {"url": receiver.hook_url, "events": ["done"]}, content_type="application/json"
        )
        assert made.status_code == 201 and made.json()["secret"].startswith("whsec_")
        listed = owner.get("/api/v1/notifications/webhooks").json()["webhooks"]
        assert "secret" not in listed[0] and listed[0]["url"] == receiver.hook_url
    assert browser(net.w.member).get("/api/v1/notifications/webhooks").status_code == 403
    assert owner.post("/api/v1/notifications/deliveries/nope/retry").status_code == 404


def test_add_channel_command(world, fakes, tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text(fakes.slack.token + "\n")
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    call_command(
        "add_channel",
        "--org",
        world.org.slug,
        "--kind",
        "slack",
        "--token-file",
        str(token),
        "--signing-secret-file",
        str(secret),
        "--json",
    )
    out = json.loads(capsys.readouterr().out)
    channel = Channel.objects.get(pk=out["channelId"])
    assert channel.kind == "slack" and channel.bot_token == fakes.slack.token and channel.secret == "s3cret"
    assert out["webhookUrl"].endswith(f"/hooks/slack/{channel.pk}")


def test_dash_pages(net):
    owner, member = browser(net.w.owner), browser(net.w.member)
    page = owner.get("/notifications/channels/")
    assert page.status_code == 200 and b"channel-create" in page.content and str(net.slack.pk).encode() in page.content
    assert net.f.slack.token.encode() not in page.content
    assert b"channel-create" not in member.get("/notifications/channels/").content  # members see, owners add

    coded = member.post("/notifications/bindings/new/", {"channel": str(net.telegram.pk)})
    assert coded.status_code == 200 and b"rtscbind_" in coded.content and coded["Cache-Control"] == "no-store"
    assert member.post("/notifications/mutes/", {"kind": "done", "muted": "1"}).status_code == 302
    assert b"muted" in member.get("/notifications/bindings/").content

    assert member.get("/notifications/webhooks/").status_code == 403
    assert member.get("/notifications/dead/").status_code == 403
    assert owner.get("/notifications/dead/").status_code == 200


def test_dead_letter_retry_from_the_dash(net, clock):
    net.bind_telegram(net.w.member, 2)
    issue = new_issue(net.w.b, "Dead then alive")
    claim = leases.claim_issue(actor=net.w.a, identifier=issue.identifier)
    issue_update(actor=net.w.a, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])
    net.f.telegram.fail_next(1, 500)
    deliver_due()
    Delivery.objects.update(window_start=clock.now - timedelta(hours=25))
    clock.advance(seconds=11)
    net.f.telegram.fail_next(1, 500)
    assert deliver_due()["dead"] == 1
    owner = browser(net.w.owner)
    page = owner.get("/notifications/dead/")
    (d,) = Delivery.objects.all()
    assert str(d.pk).encode() in page.content
    assert owner.post(f"/notifications/deliveries/{d.pk}/retry/").status_code == 302
    assert deliver_due()["sent"] == 1
    assert b"No dead letters." in owner.get("/notifications/dead/").content
