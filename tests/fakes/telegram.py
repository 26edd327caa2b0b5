"""A fake Telegram Bot API: ``setWebhook`` and ``sendMessage`` under /bot<token>/."""

from __future__ import annotations

from tests.fakes.base import FakeServer


class FakeTelegram(FakeServer):
    def __init__(self):
        super().__init__()
        self.token = "123456:telegram-test-token"
        self.webhook: dict | None = None
        self.delivered: dict[str, dict] = {}
        self.route("POST", r"/bot(?P<token>[^/]+)/setWebhook", self._set_webhook)
        self.route("POST", r"/bot(?P<token>[^/]+)/sendMessage", self._send)

    def _wrong_token(self, request):
        if request.match["token"] != self.token:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        return None

    def _set_webhook(self, request):
        wrong = self._wrong_token(request)
        if wrong:
            return wrong
        self.webhook = request.json
        return 200, {"ok": True, "result": True, "description": "Webhook was set"}

    def _send(self, request):
        wrong = self._wrong_token(request)
        if wrong:
            return wrong
        self.delivered.setdefault(request.header("idempotency-key") or str(len(self.delivered)), request.json)
        return 200, {"ok": True, "result": {"message_id": len(self.delivered), "text": request.json["text"]}}

    def texts_to(self, chat_id) -> list[str]:
        return [m["text"] for m in self.delivered.values() if str(m["chat_id"]) == str(chat_id)]
