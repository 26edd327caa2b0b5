"""Search over sealed content (SPEC §8): keyed terms, CJK bigrams, ranking, filters, and
no plaintext in the index."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from apps.core import search
from apps.core.errors import ServiceError
from apps.issues.models import SearchTerm
from apps.issues.selectors import issue_list
from apps.issues.services import issue_update
from apps.tools import operations
from tests.conftest import new_issue


def found(actor, query, **filters):
    rows, _ = issue_list(actor=actor, query=query, **filters)
    return [i.title for i in rows]


def test_terms_split_words_and_cjk_bigrams():
    assert search.terms("Fix the LOGIN page!") == {"fix", "the", "login", "page"}
    assert search.terms("数据库连接失败") == {"数据", "据库", "库连", "连接", "接失", "失败"}
    assert search.terms("修复 bug 在登录页") == {"修复", "bug", "在登", "登录", "录页"}
    assert search.terms("ｆｕｌｌｗｉｄｔｈ Straße") == {"fullwidth", "strasse"}
    assert search.terms("猫") == {"猫"}
    assert search.terms("") == set() and search.terms("--- !!") == set()


def test_matches_rank_by_terms_then_dispatch_order(world):
    new_issue(world.a, "Login page crashes", body="The login form throws", priority=4)
    new_issue(world.a, "Crash on logout", priority=1)
    new_issue(world.a, "Unrelated chore")
    new_issue(world.a, "Login timeout", priority=2)
    # two terms match the first; one matches the others, which follow dispatch order (urgent first)
    assert found(world.a, "login crashes") == ["Login page crashes", "Login timeout"]
    assert found(world.a, "login crash") == ["Crash on logout", "Login timeout", "Login page crashes"]  # no stemming
    assert found(world.a, "crash OR logout") == ["Crash on logout"]
    assert found(world.a, "LOGIN") == ["Login timeout", "Login page crashes"]
    assert found(world.a, "throws") == ["Login page crashes"]  # the body counts
    assert found(world.a, "nothing-like-this") == []
    assert found(world.a, "??") == []


def test_cjk_text_is_found_by_any_two_characters(world):
    new_issue(world.a, "数据库连接失败", body="重启后恢复")
    new_issue(world.a, "登录页面错误")
    assert found(world.a, "连接") == ["数据库连接失败"]
    assert found(world.a, "数据库") == ["数据库连接失败"]
    assert found(world.a, "重启") == ["数据库连接失败"]
    assert found(world.a, "页面") == ["登录页面错误"]


def test_filters_combine_with_the_query_and_pages_continue(world):
    for n in range(5):
        new_issue(world.a, f"Flaky test {n}", labels=["ci"] if n % 2 else [])
    assert sorted(found(world.a, "flaky", label="ci")) == ["Flaky test 1", "Flaky test 3"]
    first, cursor = issue_list(actor=world.a, query="flaky", limit=2)
    second, cursor2 = issue_list(actor=world.a, query="flaky", limit=2, cursor=cursor)
    third, end = issue_list(actor=world.a, query="flaky", limit=2, cursor=cursor2)
    titles = [i.title for i in first + second + third]
    assert sorted(titles) == [f"Flaky test {n}" for n in range(5)] and end is None
    with pytest.raises(ServiceError) as bad:
        issue_list(actor=world.a, query="flaky", cursor="bm90IGEgY3Vyc29y")
    assert bad.value.code == "INVALID_ARGUMENT"


def test_every_filter_combines_with_the_query_in_one_statement(world):
    from django.test.utils import CaptureQueriesContext

    from apps.issues.services import issue_create

    new_issue(world.a, "Parser bug one", priority=1, labels=["ci"], assignee=world.owner.email)
    new_issue(world.a, "Parser bug two", priority=3, labels=["ci"])
    new_issue(world.b, "Parser bug three", priority=1)
    issue_create(actor=world.a, title="Parser bug four", work=False, no_dependency="container")
    new_issue(world.a, "Parser idea")
    assert found(world.a, "parser bug", priority=1) == ["Parser bug one", "Parser bug three"]
    assert found(world.a, "parser bug", priority=[1, 3], label="ci") == ["Parser bug one", "Parser bug two"]
    assert found(world.a, "parser bug", author=world.member.email) == ["Parser bug three"]
    assert found(world.a, "parser bug", assignee="me") == ["Parser bug one"]
    assert "Parser bug one" not in found(world.a, "parser bug", assignee="none")
    assert found(world.a, "parser", status="todo", project="ACME", label="ci") == ["Parser bug one", "Parser bug two"]
    assert found(world.a, "parser", status=["done", "canceled"]) == []
    with CaptureQueriesContext(connection) as statements:
        rows, _ = issue_list(actor=world.a, query="parser bug", priority=[1, 3], label="ci", status="todo")
    assert [(i.title, i.hits) for i in rows] == [("Parser bug one", 2), ("Parser bug two", 2)]
    assert len(statements.captured_queries) == 1  # the rank, the rows and their people
    assert rows[0].assignee.email == world.owner.email and rows[0].project.prefix == "ACME"


def test_an_edit_reindexes_and_other_orgs_never_match(world):
    issue = new_issue(world.a, "Old words here")
    new_issue(world.x, "Old words elsewhere")
    issue_update(actor=world.a, identifier=issue.identifier, title="Fresh title")
    assert found(world.a, "old") == [] and found(world.a, "fresh") == ["Fresh title"]
    assert found(world.x, "fresh") == [] and found(world.x, "old") == ["Old words elsewhere"]


def test_the_index_holds_no_plaintext_and_differs_per_org(world):
    new_issue(world.a, "Zebracorn migration")
    new_issue(world.x, "Zebracorn migration")
    ours = set(SearchTerm.objects.filter(org=world.org).values_list("term", flat=True))
    theirs = set(SearchTerm.objects.filter(org=world.other_org).values_list("term", flat=True))
    assert ours and theirs and not ours & theirs  # equal words, different keys
    with connection.cursor() as cur:
        cur.execute(f"SELECT term FROM {SearchTerm._meta.db_table}")
        blobs = b"".join(bytes(row[0]) for row in cur.fetchall())
    assert b"zebracorn" not in blobs.lower() and b"migration" not in blobs.lower()
    assert all(len(bytes(t)) == search.TERM_BYTES for t in ours)


def test_list_issues_tool_takes_query_and_refuses_bad_ones(world):
    new_issue(world.a, "Searchable thing")
    answer = operations.list_issues(world.a, query="searchable")
    assert [i["title"] for i in answer["issues"]] == ["Searchable thing"]
    with pytest.raises(ServiceError) as long:
        operations.list_issues(world.a, query="x" * 201)
    assert long.value.code == "INVALID_ARGUMENT" and long.value.details["field"] == "query"


def test_rebuild_command_restores_a_lost_index(world):
    new_issue(world.a, "Rebuilt later")
    SearchTerm.objects.filter(org=world.org).delete()
    assert found(world.a, "rebuilt") == []
    call_command("rebuild_search_index", "--org", world.org.slug, stdout=__import__("io").StringIO())
    assert found(world.a, "rebuilt") == ["Rebuilt later"]
