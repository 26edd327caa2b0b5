"""The one client for Stripe: Checkout sessions for card top-ups, and webhook signatures.

Uses the official ``stripe`` package; its API base is ``RETASC_STRIPE_API_URL`` (tests
point it at a fake on the loopback). Errors from Stripe become ``UNAVAILABLE`` with one
sentence of our own: the processor's messages and the secret key never reach a caller or
a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time

import stripe
from django.conf import settings

from apps.core.errors import ServiceError

log = logging.getLogger(__name__)

SIGNATURE_TOLERANCE_SECONDS = 300  # Stripe's documented default: 5 minutes
MICROS_PER_CENT = 10_000


def checkout_enabled() -> bool:
    return bool(settings.RETASC_STRIPE_SECRET_KEY)


def webhook_enabled() -> bool:
    return bool(settings.RETASC_STRIPE_WEBHOOK_SECRET)


def _client() -> stripe.StripeClient:
    return stripe.StripeClient(
        settings.RETASC_STRIPE_SECRET_KEY,
        base_addresses={"api": settings.RETASC_STRIPE_API_URL},
        max_network_retries=1,
        http_client=stripe.RequestsClient(timeout=15),
    )


def checkout_session_create(
    *, org_slug: str, amount_cents: int, success_url: str, cancel_url: str, email: str | None = None
) -> dict:
    """Create a one-off Checkout session paying ``amount_cents`` USD of credit for the org.

    The org travels as ``client_reference_id`` and ``metadata.org`` (SPEC §11), and on the
    payment intent too, so the charge it produces names it. Answers ``{id, url}``.
    """
    params: dict = {
        "mode": "payment",
        "client_reference_id": org_slug,
        "metadata": {"org": org_slug},
        "payment_intent_data": {"metadata": {"org": org_slug}},
        "line_items": [
            {
                "quantity": 1,
                "price_data": {
                    "currency": "usd",
                    "unit_amount": amount_cents,
                    "product_data": {"name": f"Retasc credit ${amount_cents // 100}"},
                },
            }
        ],
        "success_url": success_url,
        "cancel_url": cancel_url,
    }
    if email:
        params["customer_email"] = email
    try:
        session = _client().v1.checkout.sessions.create(params=params)
    except stripe.StripeError as exc:
        # The class and HTTP status only: Stripe's own message may echo request details.
        log.warning("Stripe Checkout session creation failed: %s (HTTP %s)", type(exc).__name__, exc.http_status)
        raise ServiceError("UNAVAILABLE", "The card processor could not start a checkout; try again in a minute.") from None
    return {"id": session.id, "url": session.url}


def signature_verify(*, payload: bytes, header: str, secret: str, now: float | None = None) -> None:
    """Check a ``Stripe-Signature`` header: ``t=<unix time>,v1=<hex HMAC-SHA256>`` over
    ``"<t>.<payload>"`` with the endpoint secret, ``t`` within 5 minutes of now.

    Several ``v1`` values may be present (secret rotation); any one matching is enough.
    Compared in constant time. Refusals are ``UNAUTHORIZED`` with one message whatever
    was wrong, except a stale timestamp, which says so.
    """
    refused = ServiceError("UNAUTHORIZED", "The Stripe-Signature header does not verify.")
    timestamp, signatures = None, []
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            timestamp = value
        elif name == "v1" and value:
            signatures.append(value)
    if not timestamp or not timestamp.isdigit() or not signatures:
        raise refused
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, candidate) for candidate in signatures):
        raise refused
    if abs((now if now is not None else time.time()) - int(timestamp)) > SIGNATURE_TOLERANCE_SECONDS:
        raise ServiceError("UNAUTHORIZED", "The Stripe-Signature timestamp is outside the 5-minute tolerance.")
