"""E-mail through a real SMTP server (aiosmtpd on 127.0.0.1), and the SLA breaching notice."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Message

from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.notifications.delivery import deliver_due
from apps.notifications.events import sla_breaching_scan
from apps.notifications.models import Outbox
from tests.conftest import new_issue


class Inbox(Message):
    def __init__(self):
        super().__init__()
        self.messages = []

    def handle_message(self, message):
        self.messages.append(message)


@pytest.fixture
def smtp(settings):
    inbox = Inbox()
    with socket.socket() as probe:  # a free port: the controller checks it by connecting
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield inbox
    controller.stop()


def test_done_by_email_through_smtp(net, smtp):
    net.bind_email(net.w.member)
    issue = new_issue(net.w.b, "Mail me")
    claim = leases.claim_issue(actor=net.w.a, identifier=issue.identifier)
    issue_update(actor=net.w.a, identifier=issue.identifier, status="done", claim_token=claim["claimToken"])

    assert deliver_due()["sent"] == 1

    (message,) = smtp.messages
    assert message["To"] == net.w.member.email
    assert message["Subject"] == f"{issue.identifier} is done"
    assert message["Message-ID"].startswith("<") and message["Message-ID"].endswith("@retasc>")
    assert f"{issue.identifier} is done: Mail me" in message.get_payload()


def test_sla_breaching_tells_the_assignee_once(net, clock):
    net.bind_telegram(net.w.member, 2)
    due = clock.now + timedelta(hours=10)
    issue = new_issue(net.w.a, "Due soon", assignee=net.w.member.email, due_at=due.isoformat())
    deliver_due()  # the "assigned" message
    before = len(net.f.telegram.texts_to(2))

    clock.advance(hours=8)  # 80 %: warning, not yet breaching
    assert sla_breaching_scan() == 0
    clock.advance(hours=1, minutes=30)  # 95 %: breaching
    assert sla_breaching_scan() == 1
    assert sla_breaching_scan() == 0  # told once per deadline
    deliver_due()
    texts = net.f.telegram.texts_to(2)[before:]
    assert len(texts) == 1 and texts[0].startswith(f"{issue.identifier} is close to its deadline")
    assert Outbox.objects.filter(kind="sla_breaching", user=net.w.member).count() == 1
