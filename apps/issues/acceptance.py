"""Acceptance criteria, and the checks a machine can verify on their evidence.

A criterion is text, or ``{"text": ..., "check": {"type": ...}}``:

- ``required_fields`` (``{"type": "required_fields", "fields": ["url", "sha"]}``): the
  evidence entry is an object (or the JSON text of one) with each named key present and
  not empty;
- ``tests_green`` (``{"type": "tests_green"}``): the evidence holds a test runner's
  summary line that says tests passed and none failed (pytest, jest, cargo, go, unittest).

A check of any other type is kept as given and fails closed: ``done`` is refused until a
person rewrites the criterion. ``"check": "tests_green"`` is short for
``{"type": "tests_green"}``.
"""

from __future__ import annotations

import json
import re

from apps.core.errors import ServiceError, invalid

KNOWN_CHECKS = ("required_fields", "tests_green")
MAX_ITEMS = 50
MAX_TEXT = 2000


def criterion_text(criterion) -> str:
    return criterion["text"] if isinstance(criterion, dict) else str(criterion)


def criterion_check(criterion) -> dict | None:
    return criterion.get("check") if isinstance(criterion, dict) else None


def _check(value) -> dict:
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict) or not isinstance(value.get("type"), str) or not value["type"].strip():
        raise invalid("acceptance", 'a check is {"type": "required_fields", "fields": [...]} or {"type": "tests_green"}.')
    kind = value["type"].strip()
    if kind == "required_fields":
        fields = value.get("fields")
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f.strip() for f in fields):
            raise invalid("acceptance", "a required_fields check names its fields: a non-empty list of keys.")
        return {"type": kind, "fields": [f.strip() for f in fields][:MAX_ITEMS]}
    if kind == "tests_green":
        return {"type": kind}
    # Unknown: kept (trimmed to its type and plain values) so that done fails closed on it.
    return {"type": kind[:60]}


def parse(value) -> list:
    """Criteria as given to save_issue: a list of text and/or ``{text, check}`` objects."""
    if value is None:
        return []
    if isinstance(value, str | dict):
        value = [value]
    if not isinstance(value, list | tuple):
        raise invalid("acceptance", "acceptance must be a list of criteria.")
    if len(value) > MAX_ITEMS:
        raise invalid("acceptance", f"acceptance has more than {MAX_ITEMS} entries.")
    out: list = []
    for item in value:
        text, check = (item.get("text"), item.get("check")) if isinstance(item, dict) else (item, None)
        if isinstance(item, dict) and set(item) - {"text", "check"}:
            raise invalid("acceptance", "a criterion object has only text and check.")
        if not isinstance(text, str) or not text.strip():
            raise invalid("acceptance", "every criterion has non-empty text.")
        if len(text) > MAX_TEXT:
            raise invalid("acceptance", f"a criterion is longer than {MAX_TEXT} characters.")
        out.append({"text": text.strip(), "check": _check(check)} if check is not None else text.strip())
    return out


# A summary line that reports passing tests (pytest "12 passed", jest "Tests: 5 passed",
# cargo "test result: ok. 5 passed", unittest "OK" after "Ran 5 tests", go "ok  pkg").
_PASSED = re.compile(r"\b([1-9]\d*) (passed|passing)\b", re.IGNORECASE)
_FAILED_COUNT = re.compile(r"\b([1-9]\d*) (failed|failing|errors?)\b", re.IGNORECASE)
_FAILED_WORD = re.compile(r"\bFAILED\b|^FAIL\b", re.M)  # pytest "FAILED tests/...", go "FAIL pkg"
_UNITTEST_OK = re.compile(r"^Ran ([1-9]\d*) tests? in .*\n+\s*OK\b", re.M)
_GO_OK = re.compile(r"^ok\s+\S+\s+[\d.]+s$", re.M)


def _tests_green(evidence) -> str | None:
    text = evidence if isinstance(evidence, str) else json.dumps(evidence)
    if _FAILED_COUNT.search(text) or _FAILED_WORD.search(text):
        return "the evidence reports failing tests."
    if _PASSED.search(text) or _UNITTEST_OK.search(text) or _GO_OK.search(text):
        return None
    return "the evidence has no passing test summary line (e.g. '12 passed in 3.1s')."


def _required_fields(evidence, fields: list) -> str | None:
    data = evidence
    if isinstance(evidence, str):
        try:
            data = json.loads(evidence)
        except ValueError:
            data = None
    if not isinstance(data, dict):
        return f"the evidence must be an object with {', '.join(fields)}."
    missing = [f for f in fields if data.get(f) in (None, "", [], {})]
    if missing:
        return f"the evidence lacks {', '.join(missing)}."
    return None


def failure(criterion, evidence) -> str | None:
    """Why ``evidence`` does not satisfy ``criterion``'s check, or None if it does."""
    check = criterion_check(criterion)
    if check is None:
        return None
    if check["type"] == "tests_green":
        return _tests_green(evidence)
    if check["type"] == "required_fields":
        return _required_fields(evidence, check.get("fields") or [])
    return f"the check {check['type']!r} is unknown to this server, so it cannot pass."


def require_evidence(*, identifier: str, criteria: list, evidence: list) -> None:
    """Refuse (``ACCEPTANCE_EVIDENCE_REQUIRED``) unless each criterion has evidence that passes its check."""
    missing, failed = [], []
    for index, criterion in enumerate(criteria):
        given = evidence[index] if index < len(evidence) else None
        if not given:
            missing.append({"index": index, "number": index + 1, "criterion": criterion_text(criterion)})
            continue
        reason = failure(criterion, given)
        if reason:
            failed.append(
                {
                    "index": index,
                    "number": index + 1,
                    "criterion": criterion_text(criterion),
                    "check": criterion_check(criterion)["type"],
                    "reason": reason,
                }
            )
    if missing:
        raise ServiceError(
            "ACCEPTANCE_EVIDENCE_REQUIRED",
            # Criteria are counted from 1 for people; ``index`` (from 0) is the evidence slot.
            f"Give evidence for every acceptance criterion; missing for "
            f"{'criterion' if len(missing) == 1 else 'criteria'} {', '.join(str(m['number']) for m in missing)}.",
            missing=missing,
            failedChecks=failed,
        )
    if failed:
        first = failed[0]
        raise ServiceError(
            "ACCEPTANCE_EVIDENCE_REQUIRED",
            f"The {first['check']} check of criterion {first['number']} failed: {first['reason']}",
            missing=[],
            failedChecks=failed,
        )


# One criterion per line in the Dash's form: ``text {tests_green}`` or
# ``text {required_fields: url, sha}`` carries a check, plain text carries none.
_LINE_CHECK = re.compile(r"^(?P<text>.*?)\s*\{(?P<type>[a-z_]+)(?::(?P<fields>[^}]*))?\}\s*$")


def to_line(criterion) -> str:
    check = criterion_check(criterion)
    if check is None:
        return criterion_text(criterion)
    fields = check.get("fields")
    return f"{criterion_text(criterion)} {{{check['type']}{': ' + ', '.join(fields) if fields else ''}}}"


def from_line(line: str):
    match = _LINE_CHECK.match(line)
    if not match or not match["text"].strip():
        return line
    check: dict = {"type": match["type"]}
    if match["fields"] is not None:
        check["fields"] = [f.strip() for f in match["fields"].split(",") if f.strip()]
    return {"text": match["text"].strip(), "check": check}


def evidence_text(entry) -> str:
    return json.dumps(entry) if isinstance(entry, dict) else (entry or "")
