"""The live feed of an org for open Dash pages (``/ws/org/``).

A signed-in session joins exactly one group: its current org's, and only while the
person is an active member of it. Events carry no content (verb, identifier, runtime);
the page re-reads what it shows through the normal, permission-checked views.
"""

from __future__ import annotations

import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.session import SESSION_ORG
from apps.core.events import org_group
from apps.orgs.models import Membership

RECHECK_SECONDS = 30  # a suspended person stops receiving events within this time


@database_sync_to_async
def _active_org_id(user_id, org_id):
    if not org_id:
        return None
    row = (
        Membership.objects.filter(user_id=user_id, org_id=org_id, status=Membership.Status.ACTIVE, org__deleted_at__isnull=True)
        .values_list("org_id", flat=True)
        .first()
    )
    return row


class OrgEventsConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        session = self.scope.get("session")
        wanted = session.get(SESSION_ORG) if session is not None else None
        try:
            org_id = await _active_org_id(user.pk, wanted)
        except Exception:  # a malformed id in the session is no org
            org_id = None
        if org_id is None:
            await self.close(code=4403)
            return
        self.user_id, self.org_id = user.pk, org_id
        self.checked_at = time.monotonic()
        self.group = org_group(org_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "org": str(org_id)})

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def org_events(self, message):
        if time.monotonic() - self.checked_at > RECHECK_SECONDS:
            if await _active_org_id(self.user_id, self.org_id) is None:
                await self.close(code=4403)
                return
            self.checked_at = time.monotonic()
        await self.send_json({"type": "events", "events": message.get("events", [])})
