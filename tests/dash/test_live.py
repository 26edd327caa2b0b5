"""The live feed (/ws/org/): session-authenticated, one org's group only, no leaks.

Given sockets opened by a member of org A and by the outsider (org B), when issues
change in both orgs, then each socket receives only its own org's events.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from apps.dash.routing import websocket_application
from tests.conftest import new_issue


def session_cookie(user, *, visit: bool = True) -> str:
    client = Client()
    client.force_login(user)
    if visit:
        assert client.get("/queue/").status_code == 200  # the Dash picks the current org
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def communicator(cookie: str | None, *, origin: bytes = b"http://127.0.0.1", app=websocket_application):
    headers = [(b"host", b"127.0.0.1"), (b"origin", origin)]
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(app, "/ws/org/", headers=headers)


async def open_socket(cookie, **kw):
    ws = communicator(cookie, **kw)
    connected, code = await ws.connect(timeout=5)
    return ws, connected, code


async def next_events(ws, timeout=3) -> list[dict]:
    message = await ws.receive_json_from(timeout=timeout)
    assert message["type"] == "events"
    return message["events"]


def test_member_gets_own_org_events_and_never_another_orgs(tworld):
    member_cookie, outsider_cookie = session_cookie(tworld.member), session_cookie(tworld.outsider)

    async def scenario():
        a, ok_a, _ = await open_socket(member_cookie)
        b, ok_b, _ = await open_socket(outsider_cookie)
        assert ok_a and ok_b
        assert (await a.receive_json_from())["org"] == str(tworld.org.pk)
        assert (await b.receive_json_from())["org"] == str(tworld.other_org.pk)

        secret = await database_sync_to_async(new_issue)(tworld.x, "Globex only")
        events_b = await next_events(b)
        assert [e["issue"] for e in events_b] == [secret.identifier]
        assert await a.receive_nothing(timeout=0.5)  # org A's socket heard nothing

        mine = await database_sync_to_async(new_issue)(tworld.a, "Acme task")
        events_a = await next_events(a)
        assert events_a == [{"verb": "created", "issue": mine.identifier, "runtime": "claude-code"}]
        assert await b.receive_nothing(timeout=0.5)
        # Events carry no content: titles stay out of the channel layer.
        assert "Acme task" not in repr(events_a)
        await a.disconnect()
        await b.disconnect()

    asyncio.run(scenario())


def test_a_claim_is_pushed_to_the_org(tworld):
    from apps.leases.services import next_issue

    cookie = session_cookie(tworld.owner)
    issue = new_issue(tworld.a, "Claim me")

    async def scenario():
        ws, ok, _ = await open_socket(cookie)
        assert ok
        await ws.receive_json_from()
        await database_sync_to_async(next_issue)(actor=tworld.b)
        events = await next_events(ws)
        assert {"verb": "claimed", "issue": issue.identifier, "runtime": "codex"} in events
        await ws.disconnect()

    asyncio.run(scenario())


def test_anonymous_socket_is_refused(tworld):
    async def scenario():
        _, ok, code = await open_socket(None)
        assert not ok and code == 4401

    asyncio.run(scenario())


def test_session_pointing_at_another_org_is_refused(tworld):
    """A forged or stale current org (one the person is not a member of) joins nothing."""
    from importlib import import_module

    from apps.accounts.session import SESSION_ORG

    cookie = session_cookie(tworld.member)
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=cookie)
    store[SESSION_ORG] = str(tworld.other_org.pk)
    store.save()

    async def scenario():
        _, ok, code = await open_socket(cookie)
        assert not ok and code == 4403

    asyncio.run(scenario())


def test_suspended_member_is_refused(tworld):
    from apps.leases.revocation import member_suspend

    cookie = session_cookie(tworld.member)
    member_suspend(actor=tworld.owner_agent.actor, member_id=tworld.member.email)

    async def scenario():
        _, ok, code = await open_socket(cookie)
        assert not ok and code == 4403

    asyncio.run(scenario())


def test_foreign_origin_is_refused(tworld):
    cookie = session_cookie(tworld.member)

    async def scenario():
        _, ok, _ = await open_socket(cookie, origin=b"https://evil.example")
        assert not ok

    asyncio.run(scenario())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_asgi_application_routes_the_socket(tworld):
    from retasc.asgi import application

    cookie = session_cookie(tworld.owner)

    async def scenario():
        ws, ok, _ = await open_socket(cookie, app=application)
        assert ok
        assert (await ws.receive_json_from())["type"] == "hello"
        await ws.disconnect()

    asyncio.run(scenario())
