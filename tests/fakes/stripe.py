"""A fake Stripe on 127.0.0.1: Checkout session creation, and the events Stripe would send.

    fake = FakeStripe().start()            # settings.RETASC_STRIPE_API_URL = fake.url
    session = ... the server creates one through the official client ...
    event = fake.completed(session["id"])  # checkout.session.completed, paid
    body, headers = signed(event, secret)  # Stripe-Signature per the documented scheme
    event = fake.refunded(session["id"], cents=500)  # charge.refunded (cumulative amount)

Only what Retasc uses is modelled. Requests are checked like Stripe checks them: a
bearer secret key, a form-encoded body, the fields a one-off payment needs.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from urllib.parse import parse_qsl

from tests.fakes.base import FakeServer, Request

SECRET_KEY = "sk_test_fake_0123456789"
WEBHOOK_SECRET = "whsec_test_fake_0123456789"


def _error(status: int, message: str, kind: str = "invalid_request_error"):
    return status, {"error": {"type": kind, "message": message}}


def signed(event: dict, secret: str = WEBHOOK_SECRET, *, timestamp: int | None = None) -> tuple[bytes, dict]:
    """The body and headers Stripe would POST: ``Stripe-Signature: t=<ts>,v1=<hex>`` where
    v1 is HMAC-SHA256 of ``"<ts>.<body>"`` with the endpoint secret."""
    body = json.dumps(event).encode()
    ts = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return body, {"Stripe-Signature": f"t={ts},v1={mac}", "Content-Type": "application/json"}


class FakeStripe(FakeServer):
    def __init__(self, secret_key: str = SECRET_KEY):
        super().__init__()
        self.secret_key = secret_key
        self.sessions: dict[str, dict] = {}
        self._ids = itertools.count(1)
        self.route("POST", r"/v1/checkout/sessions", self._create_session)

    # --- the API -------------------------------------------------------------------------

    def _create_session(self, req: Request):
        if req.header("authorization") != f"Bearer {self.secret_key}":
            return _error(401, "Invalid API Key provided.", "authentication_error")
        if not (req.header("content-type") or "").startswith("application/x-www-form-urlencoded"):
            return _error(400, "Form-encoded body expected.")
        form = dict(parse_qsl(req.body.decode()))
        for name in (
            "mode",
            "success_url",
            "cancel_url",
            "line_items[0][price_data][unit_amount]",
            "line_items[0][price_data][currency]",
        ):
            if not form.get(name):
                return _error(400, f"Missing required param: {name}.")
        if form["mode"] != "payment":
            return _error(400, "Only payment mode is modelled.")
        n = next(self._ids)
        amount = int(form["line_items[0][price_data][unit_amount]"]) * int(form.get("line_items[0][quantity]", "1"))
        session = {
            "id": f"cs_test_{n:04d}",
            "object": "checkout.session",
            "mode": "payment",
            "status": "open",
            "payment_status": "unpaid",
            "amount_total": amount,
            "currency": form["line_items[0][price_data][currency]"],
            "client_reference_id": form.get("client_reference_id"),
            "metadata": {k[len("metadata[") : -1]: v for k, v in form.items() if k.startswith("metadata[")},
            "customer_email": form.get("customer_email"),
            "success_url": form["success_url"],
            "cancel_url": form["cancel_url"],
            "payment_intent": None,
            "url": f"{self.url}/c/pay/cs_test_{n:04d}",
            "form": form,  # not Stripe's: what was posted, for the tests
        }
        self.sessions[session["id"]] = session
        return 200, {k: v for k, v in session.items() if k != "form"}

    # --- events Stripe would send ----------------------------------------------------------

    def completed(self, session_id: str, *, event_id: str | None = None, paid: bool = True) -> dict:
        session = self.sessions[session_id]
        if paid:
            session.update(status="complete", payment_status="paid", payment_intent=f"pi_{session_id[3:]}")
        obj = {k: v for k, v in session.items() if k not in ("form", "url")}
        return {
            "id": event_id or f"evt_{session_id}_completed",
            "object": "event",
            "type": "checkout.session.completed",
            "created": int(time.time()),
            "data": {"object": obj},
        }

    def refunded(self, session_id: str, *, cents: int, event_id: str | None = None) -> dict:
        """``charge.refunded`` with ``amount_refunded`` = ``cents`` (cumulative, as Stripe sends)."""
        session = self.sessions[session_id]
        charge = {
            "id": f"ch_{session_id[3:]}",
            "object": "charge",
            "amount": session["amount_total"],
            "amount_refunded": cents,
            "currency": "usd",
            "payment_intent": session["payment_intent"],
            "refunded": cents >= session["amount_total"],
            "metadata": dict(session["metadata"]),
        }
        return {
            "id": event_id or f"evt_{session_id}_refund_{cents}",
            "object": "event",
            "type": "charge.refunded",
            "created": int(time.time()),
            "data": {"object": charge},
        }


def paid_session_event(session_id: str, org_slug: str, cents: int, *, event_id: str | None = None) -> dict:
    """A ``checkout.session.completed`` event for a paid session made elsewhere (races
    build many without a round trip to the fake)."""
    return {
        "id": event_id or f"evt_{session_id}_completed",
        "object": "event",
        "type": "checkout.session.completed",
        "created": int(time.time()),
        "data": {
            "object": {
                "id": session_id,
                "object": "checkout.session",
                "mode": "payment",
                "status": "complete",
                "payment_status": "paid",
                "amount_total": cents,
                "currency": "usd",
                "client_reference_id": org_slug,
                "metadata": {"org": org_slug},
                "payment_intent": f"pi_{session_id}",
            }
        },
    }
