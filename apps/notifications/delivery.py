"""The delivery worker's service: expand the outbox, send what is due, retry, give up.

``deliver_due()`` is what the Celery task (scaled mode) and the in-process job
(embedded mode) run. It is safe to run in several processes at once and to be killed at
any point:

1. Outbox rows not yet expanded become ``Delivery`` rows, one per live binding of the
   recipient (or per webhook that wants the event). Each delivery's idempotency key is
   derived from the outbox row and the target, and is unique: a re-expansion after a
   crash writes nothing twice.
2. A delivery is taken with a conditional update (pending and due -> sending, with a
   lease); exactly one worker wins it. No row lock is held while the network is used.
3. Sent -> ``sent``. Refused or unreachable -> ``pending`` again, due after an
   exponential backoff, or after the provider's ``Retry-After`` when it is longer. Once
   its window (24 h) has passed, ``dead``. A worker killed mid-send leaves the row
   ``sending``; when its lease ends it is taken again and sent with the same idempotency
   key (at least once; the key lets the receiver drop the repeat).

Mutes are read at send time: a muted delivery is ``skipped``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.notifications import approvals, discord, mail, slack, telegram, texts, webhooks
from apps.notifications.models import (
    TEST_KIND,
    Binding,
    Channel,
    Delivery,
    MemberLanguage,
    Mute,
    Outbox,
    Webhook,
)
from apps.notifications.providers import SendError
from apps.orgs.models import Membership

log = logging.getLogger(__name__)

DEAD_AFTER = timedelta(hours=24)
BACKOFF_FIRST, BACKOFF_MAX = 10, 3600  # seconds


def lease() -> timedelta:
    """How long a worker holds a delivery (longer than any send: the HTTP timeout is shorter)."""
    return timedelta(seconds=settings.RETASC_NOTIFY_LEASE_SECONDS)


def backoff(attempts: int) -> int:
    """Seconds before the next try after ``attempts`` failed ones: 10 s, 20 s, 40 s ... 1 h."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, attempts - 1))


def _key(outbox_id, target) -> str:
    return hashlib.sha256(f"{outbox_id}:{target}".encode()).hexdigest()[:40]


# --- 1. expansion ---------------------------------------------------------------------


def expand_outbox(*, limit: int = 200) -> int:
    """Turn unexpanded outbox rows into deliveries. Answers how many rows were expanded."""
    done = 0
    for row in Outbox.objects.filter(expanded_at__isnull=True).order_by("created_at")[:limit]:
        with transaction.atomic():
            targets: list[dict] = []
            if row.channel_id is not None:  # a "send test": every live binding of the member on that channel
                for b in Binding.objects.filter(channel_id=row.channel_id, user_id=row.user_id, removed_at__isnull=True):
                    targets.append({"binding_id": b.pk})
            elif row.user_id is not None:
                # A member suspended or retired since the action hears nothing more.
                live = Binding.objects.filter(
                    org_id=row.org_id,
                    user_id=row.user_id,
                    removed_at__isnull=True,
                    channel__removed_at__isnull=True,
                    user__memberships__org_id=row.org_id,
                    user__memberships__status=Membership.Status.ACTIVE,
                )
                targets = [{"binding_id": b.pk} for b in live]
            else:
                for hook in Webhook.objects.filter(org_id=row.org_id, removed_at__isnull=True):
                    if row.kind in (hook.events or []):
                        targets.append({"webhook_id": hook.pk})
            Delivery.objects.bulk_create(
                [
                    Delivery(
                        org_id=row.org_id,
                        outbox_id=row.pk,
                        idempotency_key=_key(row.pk, next(iter(t.values()))),
                        next_attempt_at=row.created_at,
                        window_start=row.created_at,
                        **t,
                    )
                    for t in targets
                ],
                ignore_conflicts=True,
            )
            done += Outbox.objects.filter(pk=row.pk, expanded_at__isnull=True).update(expanded_at=timezone.now())
    return done


# --- 2. sending -------------------------------------------------------------------------


def _take(delivery_id, now) -> bool:
    """pending and due -> sending, with a lease. True when this worker won it."""
    return (
        Delivery.objects.filter(pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=now).update(
            status=Delivery.Status.SENDING, lease_until=now + lease(), attempts=F("attempts") + 1
        )
        == 1
    )


def _release_stale(now) -> int:
    """Deliveries whose worker died mid-send (lease over) are due again at once."""
    return Delivery.objects.filter(status=Delivery.Status.SENDING, lease_until__lt=now).update(
        status=Delivery.Status.PENDING, next_attempt_at=now, lease_until=None
    )


def deliver_due(*, now=None, limit: int = 100) -> dict:
    now = now or timezone.now()
    expanded = expand_outbox()
    released = _release_stale(now)
    due = list(
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    counts = {"expanded": expanded, "released": released, "sent": 0, "failed": 0, "dead": 0, "skipped": 0}
    for delivery_id in due:
        if _take(delivery_id, now):
            counts[send_one(delivery_id)] += 1
    return counts


def send_one(delivery_id) -> str:
    """Send one taken delivery and record the outcome: sent, failed, dead or skipped."""
    delivery = Delivery.objects.select_related("outbox", "binding", "binding__channel", "webhook").get(pk=delivery_id)
    try:
        _send(delivery)
    except _Skip as skip:
        _finish(delivery, Delivery.Status.SKIPPED, error=str(skip))
        return "skipped"
    except SendError as exc:
        return _failed(delivery, exc)
    except Exception as exc:  # a bug must not stop the queue; the message stays retryable
        log.exception("delivery %s failed unexpectedly", delivery.pk)
        return _failed(delivery, SendError(f"Unexpected error ({type(exc).__name__})."))
    _finish(delivery, Delivery.Status.SENT)
    return "sent"


class _Skip(Exception):
    pass


def _finish(delivery: Delivery, status: str, *, error: str = "", http_status=None) -> None:
    now = timezone.now()
    Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.SENDING).update(
        status=status,
        lease_until=None,
        sent_at=now if status == Delivery.Status.SENT else None,
        last_error=error[:300],
        last_status=http_status,
    )


def _failed(delivery: Delivery, exc: SendError) -> str:
    now = timezone.now()
    wait = max(backoff(delivery.attempts), int(exc.retry_after or 0))
    if now + timedelta(seconds=wait) - delivery.window_start > DEAD_AFTER:
        _finish(delivery, Delivery.Status.DEAD, error=exc.message, http_status=exc.status)
        return "dead"
    Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.SENDING).update(
        status=Delivery.Status.PENDING,
        lease_until=None,
        next_attempt_at=now + timedelta(seconds=wait),
        last_error=exc.message,
        last_status=exc.status,
    )
    return "failed"


def _language(user_id) -> str:
    return MemberLanguage.objects.filter(user_id=user_id).values_list("language", flat=True).first() or "en"


def _send(delivery: Delivery) -> None:
    outbox = delivery.outbox
    if delivery.webhook_id is not None:
        hook = delivery.webhook
        if hook is None or hook.removed_at is not None:
            raise _Skip("The webhook was removed.")
        body = json.dumps(
            {"type": f"issue.{outbox.kind}", "timestamp": outbox.created_at.isoformat(), "data": outbox.payload},
            separators=(",", ":"),
        ).encode()
        webhooks.post(url=hook.url, secret=hook.secret, msg_id=f"msg_{delivery.idempotency_key}", body=body)
        return
    binding = delivery.binding
    if binding is None or binding.removed_at is not None or binding.channel.removed_at is not None:
        raise _Skip("The binding or its channel was removed.")
    if outbox.kind != TEST_KIND and Mute.objects.filter(org_id=outbox.org_id, user_id=outbox.user_id, kind=outbox.kind).exists():
        raise _Skip("Muted by the member.")
    payload = dict(outbox.payload or {})
    if outbox.kind == "review_requested" and outbox.issue_id:
        payload["approve_url"] = approvals.link_url(
            org_id=outbox.org_id, user_id=outbox.user_id, issue_id=outbox.issue_id, seed=delivery.idempotency_key
        )
    subject, text = texts.render(outbox.kind, payload, _language(outbox.user_id))
    channel: Channel = binding.channel
    key = delivery.idempotency_key
    if channel.kind == Channel.Provider.SLACK:
        slack.send_dm(token=channel.bot_token, user_id=binding.target, text=text, idempotency_key=key)
    elif channel.kind == Channel.Provider.DISCORD:
        discord.send_dm(token=channel.bot_token, user_id=binding.target, text=text, idempotency_key=key)
    elif channel.kind == Channel.Provider.TELEGRAM:
        telegram.send_message(token=channel.bot_token, chat_id=binding.target, text=text, idempotency_key=key)
    else:
        mail.send(address=binding.target, subject=subject, text=text, idempotency_key=key)
