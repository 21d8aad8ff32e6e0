"""``memd sessions``, ``memd usage``, ``memd pause`` and ``memd resume``: what the web
inspector shows, in a terminal. Each asks the daemon of this data dir when one serves
it (so a team daemon acts as the key's user), else opens the store itself."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from memd.cli.common import daemon_call, daemon_for, handles_errors, main, open_engine, store_user

if TYPE_CHECKING:
    from memd.engine.memory import Memd

USER_HELP = ("The user (default: the configured default user; through a daemon in auth "
             "mode, the user of the API key in MEMD_API_KEY).")


def _ask(ctx: click.Context, user_id: str | None, method: str, path: str,
         direct: Callable[[Memd, str], Any], **http: Any) -> Any:
    """The answer of the daemon's route ``path``, or of ``direct`` on the store opened
    here when no daemon serves it."""
    daemon = daemon_for(ctx)
    if daemon is not None:
        who = {"X-Memd-User": user_id} if user_id else {}
        with daemon:
            return daemon_call(daemon, method, path, headers=who, **http)
    with open_engine(ctx) as engine:
        return direct(engine, store_user(engine, user_id))


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


@main.command()
@click.option("--user", "user_id", help=USER_HELP)
@click.option("--workspace", help="Only this workspace's sessions.")
@click.option("--client", help="Only sessions of this client (as the table names it).")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="How many sessions, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON.")
@click.pass_context
@handles_errors
def sessions(ctx: click.Context, user_id: str | None, workspace: str | None,
             client: str | None, limit: int, as_json: bool) -> None:
    """List the sessions memd stored, newest first: created, last active, messages,
    client, workspace, title and id (`GET /v1/sessions/{id}/messages` or the web
    inspector shows one)."""
    from memd.engine.conversation.overview import sessions_page

    params = {"workspace": workspace, "client": client, "limit": limit}
    page = _ask(ctx, user_id, "GET", "/v1/sessions",
                lambda m, uid: sessions_page(m.store, uid, limit=limit, workspace=workspace,
                                             client=client),
                params={k: v for k, v in params.items() if v is not None})
    if as_json:
        click.echo(json.dumps(page, indent=2, ensure_ascii=False))
    elif not page["data"]:
        click.echo("no sessions")
    else:
        _table([[_when(s["created_at"]), _when(s["last_active_at"]),
                 str(s["message_count"]), s["client"] or "-", s["workspace"] or "-",
                 (s["title"] or "-")[:48], s["id"]] for s in page["data"]],
               ["CREATED", "LAST ACTIVE", "MSGS", "CLIENT", "WORKSPACE", "TITLE", "ID"])


@main.command()
@click.option("--user", "user_id", help=USER_HELP)
@click.option("--by", "group_by", type=click.Choice(["day", "model", "client", "workspace"]),
              default="day", show_default=True, help="What to sum the usage per.")
@click.option("--since", type=float, help="Only usage since this unix time.")
@click.option("--until", type=float, help="Only usage before this unix time.")
@click.option("--json", "as_json", is_flag=True, help="Print the sums as JSON.")
@click.pass_context
@handles_errors
def usage(ctx: click.Context, user_id: str | None, group_by: str, since: float | None,
          until: float | None, as_json: bool) -> None:
    """Tokens, calls and cost of the calls memd proxied, per day (UTC), model, client or
    workspace, with the total (cost at the prices configured under [prices])."""
    from memd.engine.conversation.overview import usage_summary

    params = {"group_by": group_by, "since": since, "until": until}
    found = _ask(ctx, user_id, "GET", "/v1/usage",
                 lambda m, uid: usage_summary(m.store, uid, group_by, since=since,
                                              until=until),
                 params={k: v for k, v in params.items() if v is not None})
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    if not found["data"]:
        click.echo("no usage recorded")
        return
    rows = [[r["key"] or "-", str(r["calls"]), f"{r['prompt_tokens']:,}",
             f"{r['completion_tokens']:,}", f"${r['cost_usd']:.4f}"]
            for r in [*found["data"], {**found["total"], "key": "total"}]]
    _table(rows, [group_by.upper(), "CALLS", "PROMPT", "COMPLETION", "COST"])


def pause_line(state: dict[str, Any]) -> str:
    """Where learning is paused, in a line (``memd status`` and ``memd pause`` print it)."""
    where = [w["workspace"] for w in state["workspaces"]]
    if state["everywhere"]:
        return "learning:  paused everywhere"
    if where:
        return f"learning:  paused in workspace {', '.join(where)}"
    return "learning:  on"


def _switch(ctx: click.Context, user_id: str | None, workspace: str | None,
            paused: bool) -> None:
    from memd.engine.learning.pause import set_paused

    state = _ask(ctx, user_id, "POST", "/v1/pause" if paused else "/v1/resume",
                 lambda m, uid: set_paused(m.store, uid, workspace, paused, m.now()),
                 json={"workspace": workspace} if workspace else {})
    click.echo(pause_line(state))
    if not paused and state["paused"]:
        click.echo("note:      a pause of all workspaces still holds (memd resume)")


@main.command()
@click.option("--user", "user_id", help=USER_HELP)
@click.option("--workspace", help="Pause learning in this workspace only.")
@click.pass_context
@handles_errors
def pause(ctx: click.Context, user_id: str | None, workspace: str | None) -> None:
    """Stop learning: calls still go to the model with their memory block, but memd
    stores nothing of them (no session, message, reply, memory or fact) until `memd
    resume`. It outlasts a restart."""
    _switch(ctx, user_id, workspace, True)


@main.command()
@click.option("--user", "user_id", help=USER_HELP)
@click.option("--workspace", help="Resume learning in this workspace (paused by "
                                  "`memd pause --workspace`).")
@click.pass_context
@handles_errors
def resume(ctx: click.Context, user_id: str | None, workspace: str | None) -> None:
    """Learn from calls again after `memd pause`."""
    _switch(ctx, user_id, workspace, False)
