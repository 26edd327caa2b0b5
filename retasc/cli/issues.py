"""The queue: ``retasc next`` claims work with the folder's key; ``retasc issue list`` and
``retasc issue show`` read issues."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli import claims
from retasc.cli.client import Api
from retasc.cli.errors import LOCAL, CliError
from retasc.cli.output import JsonOpt, State, emit_json, handled, out, priority_word, state

issue_app = typer.Typer(help="Read and change issues.", no_args_is_help=True)


def _issue_line(i: dict) -> str:
    prio = priority_word(i.get("priority"))
    return f"{i['identifier']:<10} {i['status']:<9} {prio:<7} {i['title']}"


@handled
def next_(
    ctx: typer.Context,
    all_lanes: Annotated[bool, typer.Option("--all-lanes", help="Also take teammates' assigned work.")] = False,
    as_json: JsonOpt = False,
):
    """Claim the next ready issue with this folder's agent key and print it."""
    st = state(ctx)
    if not st.has_key:
        raise CliError("This folder is not bound to Retasc; run retasc bind (or set RETASC_KEY).", exit_code=LOCAL)
    with st.api() as api:
        answer = api.post("/api/v1/work/next", {"allLanes": all_lanes} if all_lanes else {}, auth="key")
    if answer.get("issue") is not None:
        claims.remember(st, answer["issue"]["identifier"], answer["claimToken"])
    if as_json:
        emit_json(answer)
        return
    issue = answer.get("issue")
    if issue is None:
        out.print(
            f"Nothing ready in your lane (ready {answer.get('ready', 0)}, other lanes {answer.get('otherLanes', 0)}, "
            f"blocked {answer.get('blocked', 0)}, claimed {answer.get('claimed', 0)}, awaiting triage {answer.get('awaitingTriage', 0)})."
        )
        return
    out.print(f"Claimed [bold]{escape(issue['identifier'])}[/bold]: {escape(issue['title'])}")
    out.print(f"  branch {escape(answer['branch'])}   lease until {answer['claimExpiresAt']}")
    out.print(f"  claim token {escape(answer['claimToken'])}")
    if answer.get("resumed"):
        out.print(
            f"  resuming from a checkpoint by {escape(str(answer.get('checkpointBy')))}:\n{escape(str(answer.get('checkpoint')))}"
        )
    if issue.get("body"):
        out.print("\n" + escape(issue["body"]))
    for n, criterion in enumerate(issue.get("acceptance") or [], 1):
        out.print(f"  [{n}] {escape(criterion)}")


def _reader(st: State) -> tuple[Api, str]:
    api = st.api()
    return api, ("key" if api.key else "token")


@issue_app.command("list")
@handled
def issue_list(
    ctx: typer.Context,
    status: Annotated[
        list[str] | None, typer.Option("--status", help="todo, doing, blocked, review, done, canceled (repeatable).")
    ] = None,
    assignee: Annotated[str | None, typer.Option("--assignee", help="An e-mail, me or none.")] = None,
    label: Annotated[str | None, typer.Option("--label")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200)] = 50,
    as_json: JsonOpt = False,
):
    """List issues, newest first (with this folder's key, else as you)."""
    api, auth = _reader(state(ctx))
    params = [("limit", str(limit))] + [("status", s) for s in status or []]
    params += [("assignee", assignee)] if assignee else []
    params += [("label", label)] if label else []
    with api:
        answer = api.get("/api/v1/issues", params=params, auth=auth)
    if as_json:
        emit_json(answer)
        return
    for i in answer["issues"]:
        out.print(escape(_issue_line(i)))
    if not answer["issues"]:
        out.print("No issues.")


@issue_app.command("search")
@handled
def issue_search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Words of titles and bodies (any language).")],
    status: Annotated[list[str] | None, typer.Option("--status", help="Only these statuses (repeatable).")] = None,
    label: Annotated[str | None, typer.Option("--label")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200)] = 20,
    as_json: JsonOpt = False,
):
    """Search issues: best matches first (most words matched, then dispatch order)."""
    api, auth = _reader(state(ctx))
    params = [("query", query), ("limit", str(limit))] + [("status", s) for s in status or []]
    params += [("label", label)] if label else []
    with api:
        answer = api.get("/api/v1/issues", params=params, auth=auth)
    if as_json:
        emit_json(answer)
        return
    for i in answer["issues"]:
        out.print(escape(_issue_line(i)))
    if not answer["issues"]:
        out.print("No issues match.")


@issue_app.command("show")
@handled
def issue_show(ctx: typer.Context, identifier: Annotated[str, typer.Argument(help="PREFIX-n")], as_json: JsonOpt = False):
    """Show one issue."""
    api, auth = _reader(state(ctx))
    with api:
        issue = api.get(f"/api/v1/issues/{identifier}", auth=auth)
    if as_json:
        emit_json(issue)
        return
    out.print(f"[bold]{escape(issue['identifier'])}[/bold] {escape(issue['title'])}")
    out.print(
        f"status {issue['status']}  priority {priority_word(issue['priority'])} "
        f"(effective {priority_word(issue['effectivePriority'])})  "
        f"assignee {issue['assignee'] or '-'}  author {issue['author'] or '-'}"
    )
    if issue.get("labels"):
        out.print("labels " + escape(", ".join(issue["labels"])))
    if issue.get("blockedBy"):
        out.print("blocked by " + escape(", ".join(issue["blockedBy"])))
    if issue.get("claim"):
        out.print(f"held by {escape(str(issue['claim']['heldBy']))} until {issue['claim']['expiresAt']}")
    if issue.get("body"):
        out.print("\n" + escape(issue["body"]))
    evidence = issue.get("evidence") or []
    if issue.get("acceptance"):
        out.print("\nacceptance:")
    for n, criterion in enumerate(issue.get("acceptance") or [], 1):
        given = evidence[n - 1] if n <= len(evidence) else None
        out.print(f"  [{n}] {escape(criterion)}" + (f"\n      evidence: {escape(str(given))}" if given else ""))
    if issue.get("checkpoint"):
        out.print("\ncheckpoint: " + escape(issue["checkpoint"]))
