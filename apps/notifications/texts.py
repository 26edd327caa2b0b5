"""The messages' texts: short, linking to the issue in the Dash, in the member's language."""

from __future__ import annotations

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

HELP = "help"


def issue_url(identifier: str) -> str:
    return f"{settings.PUBLIC_URL}/issues/{identifier}/"


def render(kind: str, payload: dict, language: str) -> tuple[str, str]:
    """(subject, text) for one message."""
    with translation.override(language or "en"):
        p = {**payload, "url": issue_url(payload["identifier"]) if payload.get("identifier") else ""}
        if kind == "done":
            subject = _("%(identifier)s is done") % p
            lines = [_("%(identifier)s is done: %(title)s") % p]
        elif kind == "canceled":
            subject = _("%(identifier)s was canceled") % p
            lines = [_("%(identifier)s was canceled: %(title)s") % p, _("Reason: %(reason)s") % p]
        elif kind == "review_requested":
            subject = _("Review requested: %(identifier)s") % p
            lines = [_("Your review is requested on %(identifier)s: %(title)s") % p]
            if p.get("checkpoint"):
                lines.append(_("Handoff: %(checkpoint)s") % p)
            if p.get("approve_url"):
                lines.append(_("Approve: %(approve_url)s") % p)
        elif kind == "assigned":
            subject = _("%(identifier)s is assigned to you") % p
            lines = [_("%(identifier)s is assigned to you: %(title)s") % p]
        elif kind == "sla_breaching":
            subject = _("%(identifier)s is close to its deadline") % p
            lines = [_("%(identifier)s is close to its deadline (%(due)s): %(title)s") % p]
        else:
            subject = _("Retasc test message")
            return subject, _("Test message from Retasc: this channel works.")
        lines.append(p["url"])
        return subject, "\n".join(lines)


def help_line(language: str = "en") -> str:
    with translation.override(language or "en"):
        return _("Say: status, show KEY-N, approve KEY-N, comment KEY-N text, mute KIND or unmute KIND.")


def say(language: str, message: str, **params) -> str:
    """Translate one reply of the chat intents (``message`` is marked with gettext_noop)."""
    with translation.override(language or "en"):
        return _(message) % params if params else _(message)
