"""Chat intents: a bound member's message, acted on as that member, never a raw command.

    status                 what waits for you
    show ACME-12           one issue
    approve ACME-12        promote a review to done         (asks "yes" first)
    comment ACME-12 text   comment on an issue              (asks "yes" first)
    mute KIND / unmute KIND                                  (asks "yes" first)

Anything that changes state is parked as a ``PendingIntent`` (10 minutes) and runs only
when the member answers "yes", through the same services as every other interface.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone
from django.utils.translation import gettext_noop

from apps.core.errors import ServiceError
from apps.issues.models import Issue
from apps.issues.selectors import issue_resolve
from apps.issues.services import comment_create, issue_update
from apps.notifications import texts
from apps.notifications.actors import member_actor
from apps.notifications.models import EVENT_KINDS, Binding, MemberLanguage, PendingIntent
from apps.notifications.services import mute_set

CONFIRM_TTL = timedelta(minutes=10)
_IDENT = r"([A-Za-z][A-Za-z0-9]{1,9}-\d+)"
_PATTERNS = [
    ("status", re.compile(r"^status$", re.I)),
    ("show", re.compile(rf"^show\s+{_IDENT}$", re.I)),
    ("approve", re.compile(rf"^approve\s+{_IDENT}$", re.I)),
    ("comment", re.compile(rf"^comment\s+{_IDENT}\s+(.+)$", re.I | re.S)),
    ("mute", re.compile(r"^mute\s+(\S+)$", re.I)),
    ("unmute", re.compile(r"^unmute\s+(\S+)$", re.I)),
    ("yes", re.compile(r"^(yes|y|confirm)$", re.I)),
    ("no", re.compile(r"^(no|n|cancel)$", re.I)),
]
CHANGES_STATE = {"approve", "comment", "mute", "unmute"}


def parse(text: str) -> tuple[str, tuple] | None:
    text = text.strip()
    for name, pattern in _PATTERNS:
        match = pattern.match(text)
        if match:
            return name, match.groups()
    return None


def handle(*, binding: Binding, text: str) -> str:
    language = MemberLanguage.objects.filter(user_id=binding.user_id).values_list("language", flat=True).first() or "en"
    parsed = parse(text)
    if parsed is None:
        return texts.help_line(language)
    name, args = parsed
    try:
        actor = member_actor(org_id=binding.org_id, user_id=binding.user_id, runtime=binding.channel.kind)
        if name in CHANGES_STATE:
            return _ask(binding, name, args, language)
        if name == "yes":
            return _confirm(binding, actor, language)
        if name == "no":
            PendingIntent.objects.filter(binding=binding).delete()
            return texts.say(language, gettext_noop("Canceled."))
        if name == "show":
            return _show(issue_resolve(actor=actor, identifier=args[0].upper()))
        return _status(actor, language)
    except ServiceError as exc:
        return exc.message


def _ask(binding: Binding, name: str, args: tuple, language: str) -> str:
    if name in ("mute", "unmute") and args[0] not in EVENT_KINDS:
        return texts.say(language, gettext_noop("Kinds: %(kinds)s."), kinds=", ".join(EVENT_KINDS))
    PendingIntent.objects.update_or_create(
        binding=binding, defaults={"intent": {"name": name, "args": list(args)}, "expires_at": timezone.now() + CONFIRM_TTL}
    )
    what = f"{name} {' '.join(args)}"[:200]
    return texts.say(language, gettext_noop("Reply yes to %(what)s (or no)."), what=what)


def _confirm(binding: Binding, actor, language: str) -> str:
    pending = PendingIntent.objects.filter(binding=binding, expires_at__gt=timezone.now()).first()
    # Taken with a delete: a "yes" sent twice acts once.
    if pending is None or PendingIntent.objects.filter(pk=pending.pk).delete()[0] != 1:
        return texts.say(language, gettext_noop("Nothing is waiting for a yes."))
    name, args = pending.intent["name"], pending.intent["args"]
    if name == "approve":
        issue = issue_update(actor=actor, identifier=args[0].upper(), status="done")
        return texts.say(language, gettext_noop("Approved %(identifier)s."), identifier=issue.identifier)
    if name == "comment":
        comment_create(actor=actor, issue=args[0].upper(), body=args[1])
        return texts.say(language, gettext_noop("Commented on %(identifier)s."), identifier=args[0].upper())
    mute_set(org_id=binding.org_id, user_id=binding.user_id, kind=args[0], muted=name == "mute")
    message = gettext_noop("Muted %(kind)s.") if name == "mute" else gettext_noop("Unmuted %(kind)s.")
    return texts.say(language, message, kind=args[0])


def _show(issue: Issue) -> str:
    return f"{issue.identifier} [{issue.status}] {issue.title}\n{texts.issue_url(issue.identifier)}"


def _status(actor, language: str) -> str:
    mine = Issue.objects.filter(org_id=actor.org.pk)
    reviews = mine.filter(status="review", assignee_id=actor.principal_id).count()
    doing = mine.filter(status="doing", lease_principal_id=actor.principal_id).count()
    todo = mine.filter(status="todo", assignee_id=actor.principal_id).count()
    return texts.say(
        language,
        gettext_noop("Reviews for you: %(reviews)s. Doing: %(doing)s. To do, assigned to you: %(todo)s."),
        reviews=reviews,
        doing=doing,
        todo=todo,
    )
