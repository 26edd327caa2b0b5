"""A fake receiver of outgoing webhooks: verifies Standard Webhooks signatures on its own
(written here from the specification, not with the server's code) and drops repeats by
``webhook-id``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from tests.fakes.base import FakeServer


def verify(secret: str, headers: dict, body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "0")
    if abs(time.time() - int(stamp)) > 300:
        return False
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()).decode()
    given = [part.split(",", 1)[1] for part in headers.get("webhook-signature", "").split() if part.startswith("v1,")]
    return any(hmac.compare_digest(expected, g) for g in given)


class FakeReceiver(FakeServer):
    def __init__(self):
        super().__init__()
        self.secret: str | None = None
        self.accepted: dict[str, dict] = {}  # webhook-id -> event
        self.rejected = 0
        self.route("POST", r"/hook", self._hook)

    @property
    def hook_url(self) -> str:
        return self.url + "/hook"

    def _hook(self, request):
        if self.secret is None or not verify(self.secret, request.headers, request.body):
            self.rejected += 1
            return 401, {"message": "bad signature"}
        self.accepted.setdefault(request.header("webhook-id"), request.json)
        return 204, b""
