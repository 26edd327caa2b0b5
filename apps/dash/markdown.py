"""Markdown for issue bodies and comments: rendered by markdown-it-py, then sanitized.

Raw HTML in the source is escaped (``html: False``) and the output still goes through
nh3 with an allow-list, so neither an agent nor an intake webhook can inject markup.
"""

from __future__ import annotations

import re

import nh3
from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(["table", "strikethrough"])

_TAGS = {
    "a",
    "p",
    "br",
    "hr",
    "em",
    "strong",
    "del",
    "s",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "img",
}
_ATTRS = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "th": {"style"}, "td": {"style"}, "ol": {"start"}}


# A list item starting "[ ] " or "[x] " (GitHub task lists), tight or loose.
_TASK = re.compile(r"<li>(\s*<p>)?\[([ xX])\] ")


def _task(match: re.Match) -> str:
    checked = " checked" if match.group(2) in "xX" else ""
    box = f'<input type="checkbox" disabled{checked} aria-label="task"> '
    return f'<li class="task">{match.group(1) or ""}{box}'


def render(source: str | None) -> str:
    """Sanitized HTML for ``source`` (safe to mark safe). Task list items become
    read-only checkboxes, added after sanitizing (the source cannot produce inputs)."""
    if not source:
        return ""
    return _TASK.sub(_task, _clean(_md.render(source)))


def _clean(html: str) -> str:
    return nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRS,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
    )
