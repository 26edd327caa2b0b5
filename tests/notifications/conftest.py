"""Notification personas: the ``world`` of tests/conftest.py plus fake Slack, Discord and
Telegram servers on 127.0.0.1 with one org channel each, and helpers to bind a member
through each provider's signed inbound call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from allauth.account.models import EmailAddress
from django.test import Client

from apps.notifications import services
from apps.notifications.delivery import deliver_due
from apps.orgs.services import actor_for_human
from tests.fakes.discord import FakeDiscord, InteractionSigner, command
from tests.fakes.slack import FakeSlack, signed_command
from tests.fakes.telegram import FakeTelegram

SLACK_SECRET = "slack-signing-secret-for-tests"


@pytest.fixture
def fakes(settings):
    slack, discord, telegram = FakeSlack().start(), FakeDiscord().start(), FakeTelegram().start()
    settings.RETASC_SLACK_API_URL = slack.api_url
    settings.RETASC_DISCORD_API_URL = discord.url
    settings.RETASC_TELEGRAM_API_URL = telegram.url
    settings.RETASC_NOTIFY_TIMEOUT_SECONDS = 3
    yield SimpleNamespace(slack=slack, discord=discord, telegram=telegram)
    for fake in (slack, discord, telegram):
        fake.stop()


class Net:
    """The org's channels, and binding members through the signed inbound calls."""

    def __init__(self, world, fakes):
        self.w, self.f = world, fakes
        self.http = Client()
        self.owner = actor_for_human(user=world.owner, org=world.org)
        self.member = actor_for_human(user=world.member, org=world.org)
        self.signer = InteractionSigner()
        self.slack = services.channel_create(
            actor=self.owner, kind="slack", bot_token=fakes.slack.token, signing_secret=SLACK_SECRET
        )
        self.discord = services.channel_create(
            actor=self.owner, kind="discord", bot_token=fakes.discord.token, public_key=self.signer.public_key
        )
        self.telegram = services.channel_create(actor=self.owner, kind="telegram", bot_token=fakes.telegram.token)
        self.email = services.channel_create(actor=self.owner, kind="email")

    def actor_of(self, user):
        return self.owner if user == self.w.owner else self.member

    # --- inbound calls, signed like the providers sign them ---------------------------------

    def slack_say(self, user_id: str, text: str, **kw):
        body, headers = signed_command(SLACK_SECRET, text=text, user_id=user_id, **kw)
        return self.http.post(f"/hooks/slack/{self.slack.pk}", body, content_type="application/x-www-form-urlencoded", **headers)

    def discord_say(self, user_id: str, sub: str, values: dict, key=None):
        body, headers = self.signer.sign(command(user_id, (sub, values)), key=key)
        return self.http.post(f"/hooks/discord/{self.discord.pk}", body, content_type="application/json", **headers)

    def telegram_say(self, chat_id: int, text: str, secret: str | None = None):
        update = {"update_id": 1, "message": {"chat": {"id": chat_id}, "from": {"id": chat_id, "username": "ada"}, "text": text}}
        return self.http.post(
            f"/hooks/telegram/{self.telegram.pk}",
            update,
            content_type="application/json",
            HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=secret if secret is not None else self.telegram.secret,
        )

    # --- binding ---------------------------------------------------------------------------------

    def code(self, user, channel):
        code, _ = services.binding_code_create(actor=self.actor_of(user), channel_id=channel.pk)
        return code

    def bind_slack(self, user, slack_user: str):
        answer = self.slack_say(slack_user, f"connect {self.code(user, self.slack)}")
        assert answer.status_code == 200 and answer.json()["text"].startswith("Connected"), answer.content

    def bind_discord(self, user, discord_user: str):
        answer = self.discord_say(discord_user, "connect", {"code": self.code(user, self.discord)})
        assert answer.status_code == 200 and answer.json()["data"]["content"].startswith("Connected"), answer.content

    def bind_telegram(self, user, chat_id: int):
        answer = self.telegram_say(chat_id, f"/start {self.code(user, self.telegram)}")
        assert answer.status_code == 200 and answer.json()["text"].startswith("Connected"), answer.content

    def bind_email(self, user):
        EmailAddress.objects.get_or_create(user=user, email=user.email, defaults={"verified": True, "primary": True})
        return services.binding_email(actor=self.actor_of(user), channel_id=self.email.pk)

    def bind_everywhere(self, user, n: int):
        self.bind_slack(user, f"U{n}")
        self.bind_discord(user, f"{n}00")
        self.bind_telegram(user, n)
        self.bind_email(user)


@pytest.fixture
def net(world, fakes):
    return Net(world, fakes)


@pytest.fixture
def deliver():
    return deliver_due
