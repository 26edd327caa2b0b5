"""Live events for open Dash pages: one channel-layer group per org.

Published after commit only (``apps.core.unit``). A failure to publish (Redis down)
is logged and dropped: live updates pause, the work loop never fails because of it.
"""

from __future__ import annotations

import logging
import time

from asgiref.sync import async_to_sync

log = logging.getLogger(__name__)
_last_warning = 0.0


def org_group(org_id) -> str:
    return f"org.{str(org_id).replace('-', '')}"


def publish(org_id, events: list[dict]) -> None:
    global _last_warning
    if not events:
        return
    try:
        from channels.layers import get_channel_layer  # deferred: heavy, and reads CHANNEL_LAYERS on import

        layer = get_channel_layer()
        if layer is None:
            return
        async_to_sync(layer.group_send)(org_group(org_id), {"type": "org.events", "events": events})
    except Exception as exc:  # the action already committed; never fail it
        now = time.monotonic()
        if now - _last_warning > 30:
            _last_warning = now
            log.warning("live events paused: %s", type(exc).__name__)
