"""Hostile strings fed to every text input of the tools (apps.tools.operations, which MCP
and the HTTP API share): each call either works or is refused with a ServiceError (a
stable code, a short message that does not echo the value). Never another exception,
which an interface would answer with a 500.

The strings that gave 500s on a live server: lone surrogates, NUL bytes (PostgreSQL),
numbers past 64 bits (SQLite), carriage returns in one-line values, deep brackets, forged
cursors. Run on SQLite and on PostgreSQL (``make test-postgres``).
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.core.errors import HTTP_STATUS, ServiceError
from apps.tools import operations as ops
from tests.conftest import new_issue

SPECIALS = [
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\r",
    "a\rb",
    "a\r\nb",
    "\u2028",
    "\x1b[31m",
    "99999999999999999999999",
    "-99999999999999999999999",
    "1e309",
    "NaN",
    "[" * 5000,
    "%00",
    "",
    " ",
    "me",
    "none",
    "ACME-99999999999999999999999",
    "ACME-1\x00",
    "P\x00",
    "💥" * 50,
    "x" * 5000,
    base64.urlsafe_b64encode(b"a|b|c").decode(),
    base64.urlsafe_b64encode(b"2026-01-01T00:00:00+00:00|1|not-a-uuid").decode(),
    base64.urlsafe_b64encode(b"9999-99-99|99999999999999999999999|00000000-0000-0000-0000-000000000000").decode(),
    base64.urlsafe_b64encode("\x00|\ud800|x".encode("utf-8", "surrogatepass")).decode(),
    "!!!not base64!!!",
]

# Any code point, surrogates included (hypothesis leaves them out by default).
HOSTILE = st.one_of(
    st.sampled_from(SPECIALS),
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=40),
)

FIELDS = [
    ("save_issue:new", "title"),
    ("save_issue:new", "body"),
    ("save_issue:new", "noDependency"),
    ("save_issue:new", "labels"),
    ("save_issue:new", "acceptance"),
    ("save_issue:new", "blockedBy"),
    ("save_issue:new", "assignee"),
    ("save_issue:new", "parent"),
    ("save_issue:new", "dueAt"),
    ("save_issue:new", "priority"),
    ("save_issue:edit", "title"),
    ("save_issue:edit", "status"),
    ("save_issue:edit", "cancelReason"),
    ("save_issue:edit", "identifier"),
    ("list_issues", "status"),
    ("list_issues", "priority"),
    ("list_issues", "label"),
    ("list_issues", "author"),
    ("list_issues", "assignee"),
    ("list_issues", "slaState"),
    ("list_issues", "limit"),
    ("list_issues", "cursor"),
    ("get_issue", "identifier"),
    ("get_activity", "identifier"),
    ("check_claim", "identifier"),
    ("claim_issue", "identifier"),
    ("save_comment", "body"),
    ("save_comment", "issue"),
    ("retract_comment", "comment"),
    ("add_relation", "targetId"),
    ("add_relation", "type"),
    ("save_label", "name"),
    ("save_label", "color"),
    ("save_attachment", "url"),
    ("save_attachment", "title"),
    ("get_attachment", "attachment"),
    ("list_members", "query"),
    ("get_project", "prefix"),
    ("mint_session_key", "label"),
]


def _call(world, issue, target: str, field: str, value):
    a = world.a
    if target == "save_issue:new":
        args = {"title": "Hostile", "work": True, "noDependency": "none"}
        if field in ("labels", "acceptance", "blockedBy"):
            value = [value]
        if field == "blockedBy":
            args.pop("noDependency")
        return ops.save_issue(a, **{**args, field: value})
    if target == "save_issue:edit":
        args = {"identifier": issue, field: value}
        if field == "status":
            args["cancelReason"] = "reason"
        return ops.save_issue(a, **args)
    if target in ("get_issue", "get_activity", "check_claim", "claim_issue", "list_issues", "list_members", "get_project"):
        return getattr(ops, target)(a, **{field: value})
    if target == "save_comment":
        return ops.save_comment(a, **{"issue": issue, "body": "hi", field: value})
    if target == "retract_comment":
        return ops.retract_comment(a, comment=value, note="n")
    if target == "add_relation":
        return ops.add_relation(a, **{"sourceId": issue, "targetId": issue, "type": "related", field: value})
    if target == "save_label":
        return ops.save_label(a, **{"name": "lbl", field: value})
    if target == "save_attachment":
        return ops.save_attachment(a, **{"issue": issue, "url": "https://example.com/x", field: value})
    if target == "get_attachment":
        return ops.get_attachment(a, attachment=value)
    if target == "mint_session_key":
        return ops.mint_session_key(a, label=value)
    raise AssertionError(target)


@pytest.mark.parametrize(("target", "field"), FIELDS, ids=[f"{t}.{f}" for t, f in FIELDS])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_every_text_input_works_or_refuses_cleanly(world, target, field, value):
    issue = getattr(world, "_hostile_issue", None)
    if issue is None:
        issue = world._hostile_issue = new_issue(world.a, "Target").identifier
    try:
        _call(world, issue, target, field, value)
    except ServiceError as exc:
        assert exc.code.split(":")[0] in HTTP_STATUS, exc.code
        assert len(exc.message) < 400, exc.message  # never the value echoed whole
        if isinstance(value, str) and len(value) >= 1000:
            assert value not in exc.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a\x00b", "title must not contain NUL characters."),
        ("x\ud800y", "title is not valid Unicode text (it has a lone surrogate)."),
        ("two\rlines", "title must be one line."),
    ],
)
def test_bad_text_is_refused_with_a_sentence(world, unchanged, value, message):
    with unchanged():
        with pytest.raises(ServiceError) as exc:
            ops.save_issue(world.a, title=value, work=True, noDependency="none")
    assert (exc.value.code, exc.value.message) == ("INVALID_ARGUMENT", message)
