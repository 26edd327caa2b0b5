"""A fake Slack Web API (``chat.postMessage``) on tests/fakes/base.py, and the signer of
slash commands as Slack sends them (signing secret, version v0)."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

from tests.fakes.base import FakeServer


class FakeSlack(FakeServer):
    def __init__(self):
        super().__init__()
        self.token = "xoxb-test-token"
        self.delivered: dict[str, dict] = {}  # idempotency key -> the message, first copy
        self.route("POST", r"/api/chat\.postMessage", self._post)

    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    def _post(self, request):
        if request.header("authorization") != f"Bearer {self.token}":
            return 200, {"ok": False, "error": "invalid_auth"}
        self.delivered.setdefault(request.header("idempotency-key") or str(len(self.delivered)), request.json)
        return 200, {"ok": True, "channel": request.json["channel"], "ts": f"{time.time():.6f}"}

    def texts_to(self, user_id: str) -> list[str]:
        return [m["text"] for m in self.delivered.values() if m["channel"] == user_id]


def signed_command(secret: str, *, text: str, user_id: str, user_name: str = "ada", stamp: int | None = None):
    """(body, headers) of a ``/retasc`` slash command."""
    body = urlencode({"command": "/retasc", "text": text, "user_id": user_id, "user_name": user_name}).encode()
    stamp = int(time.time()) if stamp is None else stamp
    signature = "v0=" + hmac.new(secret.encode(), b"v0:%d:" % stamp + body, hashlib.sha256).hexdigest()
    return body, {"HTTP_X_SLACK_REQUEST_TIMESTAMP": str(stamp), "HTTP_X_SLACK_SIGNATURE": signature}
