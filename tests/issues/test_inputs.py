"""Parsing of user-supplied values (apps.issues.inputs): every refusal is INVALID_ARGUMENT with its field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.core.errors import ServiceError
from apps.issues import inputs

UTC = UTC


def bad(field, call):
    with pytest.raises(ServiceError) as caught:
        call()
    assert (caught.value.code, caught.value.details) == ("INVALID_ARGUMENT", {"field": field})
    assert caught.value.http_status == 400
    return caught.value


# --- text ------------------------------------------------------------------------------


def test_text_strips_and_allows_missing():
    assert inputs.text("  hello  ", "title") == "hello"
    assert inputs.text(None, "body") is None
    assert inputs.text("", "body") == ""


@pytest.mark.parametrize(
    "value, kwargs",
    [
        (None, {"required": True}),
        ("   ", {"required": True}),
        (5, {}),
        (["a"], {}),
        ("x" * 11, {"limit": 10}),
        ("a\nb", {"one_line": True}),
    ],
)
def test_text_refusals(value, kwargs):
    bad("title", lambda: inputs.text(value, "title", **kwargs))


# --- boolean, priority -----------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), ("true", True), ("FALSE", False)])
def test_boolean(value, expected):
    assert inputs.boolean(value, "work") is expected


@pytest.mark.parametrize("value", [None, 0, 1, "yes", "", [True]])
def test_boolean_refusals(value):
    bad("work", lambda: inputs.boolean(value, "work"))


@pytest.mark.parametrize("value, expected", [(0, 0), (1, 1), (4, 4), ("2", 2), (3.0, 3)])
def test_priority(value, expected):
    assert inputs.priority(value) == expected


@pytest.mark.parametrize("value", [5, -1, "urgent", 1.5, True, False, None, "", [1], float("inf"), float("nan")])
def test_priority_refusals(value):
    bad("priority", lambda: inputs.priority(value))


# --- due -------------------------------------------------------------------------------


def test_due_empty_is_none():
    assert inputs.due(None, org_timezone="UTC") is None
    assert inputs.due("", org_timezone="UTC") is None


def test_due_epoch_milliseconds():
    assert inputs.due(1_800_000_000_123, org_timezone="Asia/Shanghai") == datetime(2027, 1, 15, 8, 0, 0, 123000, tzinfo=UTC)
    assert inputs.due("1800000000123", org_timezone="UTC") == datetime(2027, 1, 15, 8, 0, 0, 123000, tzinfo=UTC)


def test_due_iso_datetime_is_utc():
    value = inputs.due("2027-06-01T10:00:00-07:00", org_timezone="Asia/Shanghai")
    assert value == datetime(2027, 6, 1, 17, 0, tzinfo=UTC)
    assert value.tzinfo == UTC


def test_due_naive_datetime_in_org_zone():
    assert inputs.due("2027-06-01T10:00:00", org_timezone="Asia/Shanghai") == datetime(2027, 6, 1, 2, 0, tzinfo=UTC)
    assert inputs.due("2027-06-01 10:00", org_timezone="UTC") == datetime(2027, 6, 1, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "tz, expected",
    [
        ("UTC", datetime(2026, 12, 1, 23, 59, 59, 999000, tzinfo=UTC)),
        ("Asia/Shanghai", datetime(2026, 12, 1, 15, 59, 59, 999000, tzinfo=UTC)),
        ("America/Los_Angeles", datetime(2026, 12, 2, 7, 59, 59, 999000, tzinfo=UTC)),
        ("Pacific/Kiritimati", datetime(2026, 12, 1, 9, 59, 59, 999000, tzinfo=UTC)),  # UTC+14
    ],
)
def test_due_day_is_end_of_day_in_org_zone(tz, expected):
    assert inputs.due("2026-12-01", org_timezone=tz) == expected


def test_due_day_across_a_dst_change():
    # 2027-03-14 is the spring-forward day in New York: the day ends at UTC-4
    assert inputs.due("2027-03-14", org_timezone="America/New_York") == datetime(2027, 3, 15, 3, 59, 59, 999000, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        "-1",
        -1_800_000_000_000,
        "-1800000000000",
        10**20,
        str(10**20),
        1e300,
        float("inf"),
        float("nan"),
        1_700_000_000,  # seconds, read as milliseconds: January 1970
        0,
        "1999-12-31",
        "9999-12-31",
        "2026-02-30",
        "2027-13-01",
        "not a date",
        "2027-01-01T25:00:00",
        True,
        False,
        ["2027-01-01"],
        {"at": 1},
    ],
)
def test_due_refusals(value):
    bad("dueAt", lambda: inputs.due(value, org_timezone="UTC"))


def test_due_horizon_is_fifty_years(clock):
    soon = clock.now + timedelta(days=366 * 50) - timedelta(days=1)
    assert inputs.due(soon.isoformat(), org_timezone="UTC") == soon.astimezone(UTC)
    late = clock.now + timedelta(days=366 * 50) + timedelta(days=1)
    bad("dueAt", lambda: inputs.due(late.isoformat(), org_timezone="UTC"))


def test_due_in_the_past_but_after_2000_is_allowed():
    # an overdue deadline is a fact to record (it reads as breached), not a mistake
    assert inputs.due("2001-01-01T00:00:00Z", org_timezone="UTC") == datetime(2001, 1, 1, tzinfo=UTC)


# --- lists, evidence -------------------------------------------------------------------


def test_string_list():
    assert inputs.string_list(None, "labels") == []
    assert inputs.string_list("one", "labels") == ["one"]
    assert inputs.string_list([" a ", "b"], "labels") == ["a", "b"]


@pytest.mark.parametrize("value", [["a", ""], ["a", "  "], [1], {"a": 1}, 5, ["x" * 61], ["a"] * 51])
def test_string_list_refusals(value):
    bad("labels", lambda: inputs.string_list(value, "labels", item_limit=60))


def test_evidence_list_is_padded_to_the_criteria():
    assert inputs.evidence(["ci green"], 3) == ["ci green", "", ""]
    assert inputs.evidence(["a", "b"], 2) == ["a", "b"]


def test_evidence_by_index():
    assert inputs.evidence({"1": " docs ", 0: "ci"}, 3) == ["ci", "docs", ""]


@pytest.mark.parametrize("value", [["a", "b", "c"], {"3": "x"}, {"-1": "x"}, {"first": "x"}, {"0": ["x"]}, 7, [""]])
def test_evidence_refusals(value):
    bad("evidence", lambda: inputs.evidence(value, 2))


# --- color, url ------------------------------------------------------------------------


def test_color():
    assert inputs.color(None) == "#6b7280"
    assert inputs.color("#ABCDEF") == "#abcdef"


@pytest.mark.parametrize("value", ["red", "#abc", "abcdef", "#abcdeg", 123])
def test_color_refusals(value):
    bad("color", lambda: inputs.color(value))


def test_url():
    assert inputs.url(" https://example.com/a?b=1 ") == "https://example.com/a?b=1"


@pytest.mark.parametrize("value", [None, "", "ftp://example.com", "javascript:alert(1)", "https://", "http://a b.com"])
def test_url_refusals(value):
    bad("url", lambda: inputs.url(value))
