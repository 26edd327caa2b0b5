"""A fake Discord API (open a DM channel, post a message; a nonce with ``enforce_nonce``
drops repeats like Discord does), and the signer of interactions (Ed25519)."""

from __future__ import annotations

import json
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.fakes.base import FakeServer


class FakeDiscord(FakeServer):
    def __init__(self):
        super().__init__()
        self.token = "discord-bot-token"
        self.delivered: dict[str, dict] = {}  # nonce -> message
        self.route("POST", r"/users/@me/channels", self._open)
        self.route("POST", r"/channels/(?P<channel>[^/]+)/messages", self._post)

    def _authorized(self, request) -> bool:
        return request.header("authorization") == f"Bot {self.token}"

    def _open(self, request):
        if not self._authorized(request):
            return 401, {"message": "401: Unauthorized", "code": 0}
        return 200, {"id": f"dm-{request.json['recipient_id']}", "type": 1}

    def _post(self, request):
        if not self._authorized(request):
            return 401, {"message": "401: Unauthorized", "code": 0}
        message = {**request.json, "channel_id": request.match["channel"]}
        self.delivered.setdefault(message.get("nonce") or str(len(self.delivered)), message)
        return 200, {"id": str(len(self.delivered)), **message}

    def texts_to(self, user_id: str) -> list[str]:
        return [m["content"] for m in self.delivered.values() if m["channel_id"] == f"dm-{user_id}"]


class InteractionSigner:
    """The application's key pair: the public key goes to the channel, the private one signs."""

    def __init__(self):
        self.private = Ed25519PrivateKey.generate()
        self.public_key = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def sign(self, interaction: dict, *, key: Ed25519PrivateKey | None = None):
        body = json.dumps(interaction).encode()
        stamp = str(int(time.time()))
        signature = (key or self.private).sign(stamp.encode() + body).hex()
        return body, {"HTTP_X_SIGNATURE_ED25519": signature, "HTTP_X_SIGNATURE_TIMESTAMP": stamp}


def command(user_id: str, *options, username: str = "ada") -> dict:
    """An APPLICATION_COMMAND for ``/retasc <sub> <name>:<value>...``: options as (sub, {name: value})."""
    sub, values = options[0]
    return {
        "type": 2,
        "member": {"user": {"id": user_id, "username": username}},
        "data": {
            "name": "retasc",
            "options": [{"name": sub, "type": 1, "options": [{"name": k, "type": 3, "value": v} for k, v in values.items()]}],
        },
    }
