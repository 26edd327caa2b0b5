"""E-mail through Django's mail framework (the deployment's EMAIL_* settings)."""

from __future__ import annotations

import smtplib

from django.conf import settings
from django.core.mail import EmailMessage

from apps.notifications.providers import SendError


def send(*, address: str, subject: str, text: str, idempotency_key: str) -> None:
    message = EmailMessage(
        subject=subject,
        body=text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
        # A stable Message-ID: a resend after a crash is the same message to the receiver.
        headers={"Message-ID": f"<{idempotency_key}@retasc>", "Idempotency-Key": idempotency_key},
    )
    try:
        message.send(fail_silently=False)
    except (smtplib.SMTPException, OSError) as exc:
        raise SendError(f"The mail server refused or could not be reached ({type(exc).__name__}).") from None
