"""Memories and facts: ``memd add``, ``search``, ``list``, ``forget`` (a memory, a fact, a
session or everything of a user) and ``facts``."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from memd.cli.common import (
    KEY_ENV,
    daemon_call,
    daemon_for,
    daemon_user,
    handles_errors,
    main,
    open_engine,
    settings_for,
    store_user,
)


@main.command()
@click.argument("text")
@click.option("--user", "user_id", help="Whose memory this is (default: the local user).")
@click.option("--workspace", help="Scope the memory to a workspace (project).")
@click.option("--tier", default="L3", show_default=True, help="L0-L4 or a tier name.")
@click.option("--scope", default="global", show_default=True,
              type=click.Choice(["global", "local"]))
@click.option("--session", "session_id", help="Originating session (needed for local).")
@click.option("--tags", multiple=True, help="A tag; repeat for more (comma lists work too).")
@click.option("--importance", type=float, default=0.5, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@handles_errors
def add(ctx: click.Context, text: str, user_id: str | None, workspace: str | None,
        tier: str, scope: str, session_id: str | None, tags: tuple[str, ...],
        importance: float, as_json: bool) -> None:
    """Remember TEXT for a user (deduplicated, merged with near-duplicates)."""
    split_tags = [t for tag in tags for t in tag.split(",") if t.strip()]
    daemon = daemon_for(ctx)
    if daemon is not None:
        with daemon:
            body = {"user_id": daemon_user(ctx, user_id), "text": text,
                    "workspace": workspace, "tier": tier, "scope": scope,
                    "session_id": session_id, "tags": split_tags, "importance": importance}
            data = daemon_call(daemon, "POST", "/v1/memories",
                         json={k: v for k, v in body.items() if v is not None})
        out = {"action": data["action"], "id": data["memory"]["id"],
               "text": data["memory"]["text"], "access_count": data["memory"]["access_count"],
               "replaced": data["replaced"]}
    else:
        with open_engine(ctx) as m:
            result = m.add(text, store_user(m, user_id), workspace=workspace, tier=tier,
                           scope=scope, session_id=session_id, tags=split_tags,
                           importance=importance)
        mem = result.memory
        out = {"action": result.action, "id": mem.id, "text": mem.text,
               "access_count": mem.access_count, "replaced": [r.id for r in result.replaced]}
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"{out['action']} {out['id']}")


@main.command()
@click.argument("query")
@click.option("--user", "user_id", help="Whose memories to search (default: the local user).")
@click.option("--k", "k", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="How many hits.")
@click.option("--workspace", help="Only this workspace and the user's global memories.")
@click.option("--kinds", default="memory,summary,fact", show_default=True,
              help="Comma list among memory, summary, message, fact.")
@click.option("--json", "as_json", is_flag=True, help="Print hits as a JSON list.")
@click.pass_context
@handles_errors
def search(ctx: click.Context, query: str, user_id: str | None, k: int,
           workspace: str | None, kinds: str, as_json: bool) -> None:
    """Search a user's memories (hybrid: vector, keyword, facts, entities)."""
    kind_list = [x.strip() for x in kinds.split(",") if x.strip()]
    daemon = daemon_for(ctx)
    if daemon is not None:
        with daemon:
            body = {"user_id": daemon_user(ctx, user_id), "query": query, "k": k,
                    "kinds": kind_list, "workspace": workspace}
            hits = daemon_call(daemon, "POST", "/v1/search",
                         json={k_: v for k_, v in body.items() if v is not None})["hits"]
    else:
        with open_engine(ctx) as m:
            hits = [h.to_dict() for h in m.search(query, store_user(m, user_id), k=k,
                                                   workspace=workspace, kinds=kind_list)]
    if as_json:
        click.echo(json.dumps(hits, ensure_ascii=False))
        return
    if not hits:
        click.echo("no results")
    for h in hits:
        click.echo(f"{h['score']:.3f}  {h['kind']:<7} {h['id']}  {h['text']}")


@main.command()
@click.argument("memory_id", required=False)
@click.option("--user", "user_id", help="The owner (optional in local mode).")
@click.option("--fact", "fact", metavar="CATEGORY/KEY",
              help="Forget a fact instead: every value it had, and the memories that "
                   "state it (see `memd facts`).")
@click.option("--workspace", help="With --fact: only that workspace's fact.")
@click.option("--session", "session_id", metavar="ID",
              help="Erase a session instead: its messages and what derives from them.")
@click.option("--message", "message_id", metavar="ID",
              help="With --session: erase only that message of the session and what "
                   "derives from it (memories made from it, facts it stated).")
@click.option("--all", "everything", is_flag=True,
              help="Erase everything of the user given with --user: every row in every "
                   "table, the account included (on SQLite the files are scrubbed too).")
@click.option("--yes", is_flag=True, help="With --all: do not ask for confirmation.")
@click.option("--scrub", is_flag=True,
              help="Then (or alone: only) rewrite the store's files so that no erased or "
                   "forgotten text is left in them. PostgreSQL: ANALYZE, VACUUM FULL of "
                   "the database, CHECKPOINT and WAL switches; needs a superuser (or "
                   "pg_checkpoint, pg_monitor and pg_switch_wal) and locks each table "
                   "while rewriting it. SQLite: what every erasure does already.")
@click.pass_context
@handles_errors
def forget(ctx: click.Context, memory_id: str | None, user_id: str | None,
           fact: str | None, workspace: str | None, session_id: str | None,
           message_id: str | None, everything: bool, yes: bool, scrub: bool) -> None:
    """Delete a memory, every derived copy of it and the facts it stated; or, with
    --fact, a fact; with --session, a session (with --message too, one of its messages);
    with --all --user U, everything of U. A forgotten memory or fact prunes the messages
    it came from: kept for you, never recalled again (the output says how to erase
    them). With --scrub, then rewrite the store's files (see README, "Erasing data")."""
    if message_id is not None and session_id is None:
        raise click.UsageError("--message needs --session ID (the message's session)")
    chosen = [memory_id is not None, fact is not None, session_id is not None, everything]
    if sum(chosen) > 1 or not (any(chosen) or scrub):
        raise click.UsageError("give one of: a memory ID, --fact CATEGORY/KEY, "
                               "--session ID, --all --user USER (or only --scrub)")
    if any(chosen):
        _forget(ctx, memory_id, user_id, fact, workspace, session_id, message_id,
                everything, yes)
    if scrub:
        with open_engine(ctx) as m:
            done = m.deep_scrub()
        click.echo("scrubbed the store's files:")
        for line in done:
            click.echo(f"  {line}")


def _forget(ctx: click.Context, memory_id: str | None, user_id: str | None,
            fact: str | None, workspace: str | None, session_id: str | None,
            message_id: str | None, everything: bool, yes: bool) -> None:
    """What ``forget`` was asked to forget, but the scrub."""
    if fact is not None:
        _forget_fact(ctx, fact, user_id, workspace)
        return
    if session_id is not None or everything:
        _erase(ctx, user_id, session_id, yes, message_id)
        return
    assert memory_id is not None
    # By id alone only the store can look the owner up; with a key the daemon knows it.
    daemon = daemon_for(ctx) if user_id or os.environ.get(KEY_ENV) else None
    if daemon is not None:
        with daemon:
            pruned = daemon_call(daemon, "DELETE", f"/v1/memories/{memory_id}",
                                 params={"user_id": user_id} if user_id else None)["pruned"]
    else:
        from memd.engine.shapes import pruned_json

        with open_engine(ctx) as m:  # by id alone, unless a user or a key is given
            owner = store_user(m, user_id) if user_id or os.environ.get(KEY_ENV) else None
            pruned = pruned_json(m.forget_with_sources(memory_id, owner).pruned)
    click.echo(f"forgot {memory_id}")
    _say_pruned(pruned)


#: How many pruned messages `forget` names one by one.
NAMED_PRUNED = 10


def _say_pruned(pruned: list[dict[str, str]]) -> None:
    """Tell the user what happened to the messages a forget pruned, and how to erase
    them (``pruned`` as DELETE /v1/memories/{id} lists them)."""
    if not pruned:
        return
    n = len(pruned)
    click.echo(f"{n} message{'s' if n != 1 else ''} (what it was said in, and the "
               "replies) will no longer be recalled, searched or replayed; their original "
               "text is kept for you. To erase it for good:")
    for p in pruned[:NAMED_PRUNED]:
        click.echo(f"  memd forget --session {p['session_id']} --message {p['message_id']}"
                   f"  # {p['role']}")
    if n > NAMED_PRUNED:
        click.echo(f"  ... and {n - NAMED_PRUNED} more (`memd forget --session ID` erases "
                   "a whole session)")


def _erase(ctx: click.Context, user_id: str | None, session_id: str | None,
           yes: bool, message_id: str | None = None) -> None:
    """``forget --all``, ``forget --session`` and ``--session --message``: through the
    daemon serving this data dir when there is one in local mode (it drops what it keeps
    in memory too); else, and always with authentication (an administrator on the host),
    on the store directly."""
    if session_id is None:
        if not user_id:
            raise click.UsageError("--all needs --user USER (whose data to erase)")
        if not yes:
            click.confirm(f"Erase every row of user {user_id!r} (memories, messages, "
                          "facts, sessions, calls, usage, jobs, account)? This cannot be "
                          "undone", abort=True)
    daemon = None if settings_for(ctx).auth else daemon_for(ctx)
    if daemon is not None:
        from urllib.parse import quote

        user = daemon_user(ctx, user_id)  # --all has --user
        path = (f"/v1/users/{quote(str(user), safe='')}" if session_id is None
                else f"/v1/sessions/{quote(session_id, safe='')}")
        if message_id is not None:
            path += f"/messages/{quote(message_id, safe='')}"
        with daemon:
            counts = daemon_call(daemon, "DELETE", path, params={"user_id": user}
                                 if session_id is not None and user else None)["rows"]
    else:
        with open_engine(ctx) as m:
            user = store_user(m, user_id)
            if session_id is None:
                counts = m.erase_user(user)
            elif message_id is None:
                counts = m.erase_session(user, session_id)
            else:
                counts = m.erase_message(user, session_id, message_id)
    what = (f"user {user}" if session_id is None else f"session {session_id}"
            if message_id is None else f"message {message_id}")
    click.echo(f"erased {what}: " + ", ".join(f"{t} {n}" for t, n in counts.items() if n))


def _forget_fact(ctx: click.Context, fact: str, user_id: str | None,
                 workspace: str | None) -> None:
    category, sep, key = fact.partition("/")
    if not sep or not category.strip() or not key.strip():
        raise click.BadParameter("use CATEGORY/KEY, e.g. preference/indentation",
                                 param_hint="--fact")
    daemon = daemon_for(ctx)
    if daemon is not None:
        from urllib.parse import quote

        with daemon:
            user = daemon_user(ctx, user_id)
            params = {**({"user_id": user} if user else {}),
                      **({"workspace": workspace} if workspace else {})}
            answer = daemon_call(daemon, "DELETE",
                         f"/v1/facts/{quote(category, safe='')}/{quote(key, safe='')}",
                         params=params)
        values = [f["value"] for f in answer["deleted"]]
        pruned = answer["pruned"]
    else:
        from memd.engine.shapes import pruned_json

        with open_engine(ctx) as m:
            gone = m.forget_fact_with_sources(store_user(m, user_id), category, key,
                                              workspace=workspace)
        values = [f.value for f in gone.facts]
        pruned = pruned_json(gone.pruned)
    click.echo(f"forgot {category.strip().lower()}/{key.strip().lower()} "
               f"({len(values)} value{'s' if len(values) != 1 else ''}: {', '.join(values)})")
    _say_pruned(pruned)


@main.command()
@click.option("--user", "user_id", help="Whose facts (default: the local user).")
@click.option("--workspace")
@click.option("--history", is_flag=True, help="Also the values that were replaced.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handles_errors
def facts(ctx: click.Context, user_id: str | None, workspace: str | None, history: bool,
          as_json: bool) -> None:
    """List a user's facts (one value per category/key; forget one with
    `memd forget --fact CATEGORY/KEY`)."""
    from memd.engine.shapes import fact_json

    daemon = daemon_for(ctx)
    if daemon is not None:
        with daemon:
            params = {"user_id": daemon_user(ctx, user_id), "workspace": workspace,
                      "include_history": history}
            found = daemon_call(daemon, "GET", "/v1/facts", params={
                k: v for k, v in params.items() if v is not None})["facts"]
    else:
        with open_engine(ctx) as m:
            found = [fact_json(f) for f in m.facts(store_user(m, user_id),
                                                   workspace=workspace,
                                                   include_history=history)]
    if as_json:
        click.echo(json.dumps(found, ensure_ascii=False))
        return
    if not found:
        click.echo("no facts")
    for f in found:
        flag = "" if f["is_active"] else "  (replaced)"
        where = f"  [{f['workspace']}]" if f["workspace"] else ""
        click.echo(f"{f['category']}/{f['key']} = {f['value']}{where}{flag}")


@main.command(name="list")
@click.option("--user", "user_id", help="Whose memories (default: the local user).")
@click.option("--workspace")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@click.option("--all", "include_inactive", is_flag=True,
              help="Include superseded and inactive memories.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handles_errors
def list_(ctx: click.Context, user_id: str | None, workspace: str | None, limit: int,
          include_inactive: bool, as_json: bool) -> None:
    """List a user's memories, newest first."""
    from memd.engine.shapes import memory_json

    daemon = daemon_for(ctx)
    if daemon is not None:
        with daemon:
            mems = _listed_by(daemon, daemon_user(ctx, user_id), workspace, limit,
                              include_inactive)
    else:
        with open_engine(ctx) as m:
            mems = [memory_json(x) for x in m.list(
                store_user(m, user_id), workspace=workspace, limit=limit,
                include_inactive=include_inactive)]
    if as_json:
        click.echo(json.dumps([
            {"id": x["id"], "text": x["text"], "tier": x["tier"], "workspace": x["workspace"],
             "active": x["is_active"], "superseded_by": x["superseded_by"],
             "access_count": x["access_count"]} for x in mems
        ], ensure_ascii=False))
        return
    if not mems:
        click.echo("no memories")
    for x in mems:
        flag = "" if x["is_active"] else f"  (superseded by {x['superseded_by']})"
        click.echo(f"L{x['tier']} {x['id']}  {x['text']}{flag}")


_PAGE = 1000  # the most GET /v1/memories lists at once


def _listed_by(daemon: Any, user_id: str | None, workspace: str | None, limit: int,
               include_inactive: bool) -> list[dict[str, Any]]:
    """Up to ``limit`` memories from the daemon, a page at a time."""
    found: list[dict[str, Any]] = []
    while len(found) < limit:
        want = min(_PAGE, limit - len(found))
        params = {"user_id": user_id, "workspace": workspace, "offset": len(found),
                  "limit": want, "include_inactive": include_inactive}
        page = daemon_call(daemon, "GET", "/v1/memories", params={
            k: v for k, v in params.items() if v is not None})["memories"]
        found += page
        if len(page) < want:
            break
    return found
