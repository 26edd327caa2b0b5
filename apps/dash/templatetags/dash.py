from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _

from apps.dash import markdown
from apps.issues.handoff import fields as handoff_fields

register = template.Library()

PRIORITY_NAMES = {0: _("none"), 1: _("urgent"), 2: _("high"), 3: _("medium"), 4: _("low")}
STATUS_NAMES = {
    "todo": _("todo"),
    "doing": _("doing"),
    "blocked": _("blocked"),
    "review": _("review"),
    "done": _("done"),
    "canceled": _("canceled"),
}
SLA_NAMES = {"ok": _("on track"), "warning": _("warning"), "breaching": _("breaching"), "breached": _("breached")}
STATE_NAMES = {
    "ready": _("ready"),
    "blocked": _("blocked"),
    "held": _("held"),
    "triage": _("awaiting triage"),
    "container": _("container"),
    "closed": _("closed"),
    "waiting": _("waiting"),
}


@register.filter
def md(value):
    return mark_safe(markdown.render(value))  # noqa: S308 - sanitized by nh3


@register.filter
def priority_name(value):
    try:
        return PRIORITY_NAMES.get(int(value), value)
    except (TypeError, ValueError):
        return value


@register.filter
def status_name(value):
    return STATUS_NAMES.get(value, value)


@register.filter
def state_name(value):
    return STATE_NAMES.get(value, value)


@register.simple_tag
def status_badge(status):
    return format_html('<span class="badge st-{}">{}</span>', status, STATUS_NAMES.get(status, status))


@register.simple_tag
def sla_badge(state):
    if not state:
        return ""
    return format_html('<span class="badge sla-{}">{}</span>', state, SLA_NAMES.get(state, state))


@register.simple_tag
def priority_badge(priority, effective=None):
    p = int(priority or 0)
    eff = int(effective) if effective is not None else p
    label = PRIORITY_NAMES.get(p, p)
    if eff and eff != p:
        return format_html(
            '<span class="prio p{}" title="{}">{} <span class="muted">→ {}</span></span>',
            eff,
            _("effective priority (inherited from what it unblocks)"),
            label,
            PRIORITY_NAMES.get(eff, eff),
        )
    return format_html('<span class="prio p{}">{}</span>', p, label)


@register.filter
def as_datetime(value):
    if isinstance(value, datetime) or not value:
        return value
    return parse_datetime(value)


@register.filter
def short_change(value, limit=80):
    """A receipt value as one short line."""
    if value is None:
        return "∅"
    if isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{k}: {v}" for k, v in value.items())
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= int(limit) else text[: int(limit) - 1] + "…"


@register.filter
def get_item(mapping, key):
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def changed_items(changes):
    """A receipt's changes minus the fields a creation merely initialised to nothing."""
    empty = (None, "", [], {}, False, 0)
    out = []
    for name, change in (changes or {}).items():
        if isinstance(change, (list, tuple)) and len(change) == 2:
            before, after = change
            if before == after or (before is None and after in empty):
                continue
        else:
            before, after = None, change
        out.append((name, before, after))
    return out


@register.filter
def handoff(note):
    """A structured checkpoint's fields ({done, next, gotchas, branch}), or None for free text."""
    return handoff_fields(note)
