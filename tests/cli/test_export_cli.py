"""`retasc export` against the live server: the round trip, and a member refused."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import new_issue

pytestmark = pytest.mark.slow


def test_export_round_trip(tworld, cli_factory):
    owner, member = cli_factory(), cli_factory()
    owner.sign_in_as(tworld.owner)
    member.sign_in_as(tworld.member)
    issue = new_issue(tworld.a, "Exported title", body="Exported body")
    new_issue(tworld.x, "Outsider secret")

    done = owner("export", "--format", "json", "-o", "org.json")
    assert done.exit_code == 0, done.stderr
    data = json.loads((owner.folder / "org.json").read_text())
    assert [(i["identifier"], i["title"], i["body"]) for i in data["issues"]] == [
        (issue.identifier, "Exported title", "Exported body")
    ]
    assert "Outsider secret" not in (owner.folder / "org.json").read_text()
    assert not list(owner.folder.glob("*.part"))

    done = owner("export", "--format", "csv", "-o", "issues.csv")
    assert done.exit_code == 0, done.stderr
    with open(owner.folder / "issues.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["identifier"], r["title"]) for r in rows] == [(issue.identifier, "Exported title")]

    refused = member("export", "-o", "mine.json")
    assert refused.exit_code == 1
    assert refused.stderr.strip() == "Error: Only an org owner can export the org (FORBIDDEN); Ask an owner of the org."
    assert not (member.folder / "mine.json").exists()
