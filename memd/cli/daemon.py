"""The daemon and what it did: ``memd serve``, ``status`` and ``calls``."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from memd.cli.call_view import call_lines
from memd.cli.common import (
    daemon_call,
    daemon_for,
    handles_errors,
    main,
    open_engine,
    settings_for,
    store_user,
)
from memd.cli.virtual_view import virtual_lines
from memd.errors import InvalidInput, MemdError

if TYPE_CHECKING:
    from memd.config import Settings

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
    if report.get("mode") == "side":
        parts.append("side request" + (f" ({report['reason']})" if report.get("reason") else ""))
    previous = report.get("previous_response")  # a Responses request continuing one
    if isinstance(previous, dict) and report.get("mode") != "side" and previous.get("outcome"):
        parts.append(str(previous["outcome"]))
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
    cache = _cache_figures(metadata.get("usage") if isinstance(metadata, dict) else None)
    if cache:
        parts.append(cache)
    return "  ".join(str(p) for p in parts)


def _cache_figures(usage: Any) -> str:
    """What the model server said of its prompt cache for a call: Anthropic's cache
    read and written tokens, or OpenAI's cached prompt tokens; "" when it said nothing."""
    if not isinstance(usage, dict):
        return ""
    details = usage.get("prompt_tokens_details")
    read = usage.get("cache_read_input_tokens")
    if read is None and isinstance(details, dict):
        read = details.get("cached_tokens")
    written = usage.get("cache_creation_input_tokens")
    figures = [f"cache read={read}" if read is not None else "",
               f"cache written={written}" if written is not None else ""]
    return " ".join(f for f in figures if f)


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
              help="Print this one call readably, then its full report as JSON.")
@click.pass_context
@handles_errors
def calls(ctx: click.Context, user_id: str | None, session_id: str | None,
          since: float | None, limit: int, as_json: bool, call_id: str | None) -> None:
    """List recent chat calls proxied through memd, newest first.

    A line a call: local time, call id, HTTP status, model, session, and what memd
    injected (the context window and where its size came from, the memory tokens added,
    whether the call was a retry); a side request (a client's title, summary or
    compaction call: forwarded as sent, no memory, no session) says so and why.
    --show ID prints one call readably (the window and the tokens of each part, the
    block exactly as sent, its lines with kind, score and source, the near misses, the
    prompt-cache figures; for a virtualized call the zone, each object held below full
    and what it lost, the faults served), then its full report as JSON; --show ID --json
    prints the JSON alone."""
    daemon = daemon_for(ctx)
    if daemon is not None:
        # Without --user the daemon decides: its default user, or the key's in auth mode.
        who = {"X-Memd-User": user_id} if user_id else {}
        with daemon:
            if call_id is not None:
                found = [daemon_call(daemon, "GET", f"/v1/calls/{call_id}", headers=who)]
            else:
                params = {"session": session_id, "since": since, "limit": limit}
                found = daemon_call(daemon, "GET", "/v1/calls", headers=who, params={
                    k: v for k, v in params.items() if v is not None})["data"]
    else:
        with open_engine(ctx) as m:
            uid = store_user(m, user_id)
            if call_id is not None:
                found = [m.call(uid, call_id)]
            else:
                found = m.calls(uid, session_id=session_id, since=since, limit=limit)
    if call_id is not None:
        virtual = (found[0].get("report") or {}).get("virtual")
        if not as_json:
            click.echo("\n".join(call_lines(found[0])))
            if virtual:
                click.echo("\n".join(virtual_lines(virtual)))
            click.echo("report (JSON):")
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
    """Show where memd keeps its data and what the store holds. While a daemon serves
    this data dir and the store named here (any, when none is named), its store and
    upstream are the daemon's own, as it reports them (with MEMD_API_KEY under --auth)."""
    import memd
    from memd.cli.activity import pause_line
    from memd.engine.learning.pause import pause_state
    from memd.server.discovery import find_daemon, served_store, store_place

    settings = settings_for(ctx)
    place = store_place(settings)  # before any line: an error is then the only line
    daemon = daemon_for(ctx)
    click.echo(f"memd {memd.__version__}")
    click.echo(f"data dir:  {settings.data_dir}")
    if daemon is not None:
        with daemon:
            click.echo(f"daemon:    answers at {daemon.base_url}")
            try:
                told = daemon_call(daemon, "GET", "/v1/status")
            except MemdError as exc:  # a key is needed, or a daemon of an older memd
                told = None
                reason = str(exc)
            try:
                paused: dict[str, Any] | None = daemon_call(daemon, "GET", "/v1/pause")
            except MemdError:  # a daemon of a memd without the switch
                paused = None
        if told is not None:
            _print_daemon_status(told)
            if paused is not None:
                click.echo(pause_line(paused))
            return
        served = served_store(settings.data_dir)
        if served is not None:
            click.echo(f"database:  {served.backend}, {served.shown}")
        click.echo(f"note:      the daemon did not say more ({reason})")
        return
    running = find_daemon(settings.data_dir)
    if running is not None:
        with running:
            served = served_store(settings.data_dir)
            other = f" (it serves {served.backend}, {served.shown})" if served else ""
            click.echo(f"daemon:    answers at {running.base_url} for another store{other}")
    click.echo(f"database:  {place.backend}, {place.shown}")
    click.echo(f"embedder:  {settings.embedder}")
    if place.backend != "SQLite" or settings.db_path.exists():
        with open_engine(ctx) as m:
            held = m.status()
            paused_here = pause_state(m.store, store_user(m, None))
        click.echo(f"store:     {held['store']}")
        click.echo(f"schema:    v{held['schema']}")
        click.echo(f"users:     {held['users']}")
        click.echo(f"jobs:      {held['pending_jobs']} pending")
        click.echo(pause_line(paused_here))
    else:
        click.echo("store:     not created yet (the first write creates it)")


def _print_daemon_status(told: dict[str, Any]) -> None:
    store = told.get("store") or {}
    click.echo(f"database:  {store.get('backend', '?')}, {store.get('place', '?')}")
    upstream = told.get("upstream")
    click.echo("upstream:  " + ("the bundled llama.cpp model (--upstream-url local)"
                                if upstream == "local" else upstream or "none set"))
    click.echo(f"embedder:  {told.get('embedder', '?')}")
    click.echo(f"auth:      {'on: every request needs an API key' if told.get('auth') else 'off'}")
    click.echo(f"schema:    v{store.get('schema', '?')}")
    if "users" in told:
        click.echo(f"users:     {told['users']}")
    click.echo(f"jobs:      {told.get('pending_jobs', '?')} pending")


# --upstream-url local: chats go to the helper model in-process, under this base URL.
LOCAL_UPSTREAM = "local"
LOCAL_UPSTREAM_URL = "http://local/v1"


@main.command()
@click.option("--host", default=None, help="Interface to listen on (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (default 8765).")
@click.option("--upstream-url", envvar="MEMD_UPSTREAM_URL",
              help="OpenAI-compatible base URL chats are forwarded to, e.g. "
                   "http://127.0.0.1:8080/v1, or 'local': answer them with the bundled "
                   "llama.cpp model, no model server needed (env MEMD_UPSTREAM_URL).")
@click.option("--upstream-anthropic-url", envvar="MEMD_UPSTREAM_ANTHROPIC_URL",
              help="Where Anthropic Messages requests (/v1/messages: Claude Code, the "
                   "anthropic SDK) go, a base URL as ANTHROPIC_BASE_URL takes, e.g. "
                   "https://api.anthropic.com (default: --upstream-url; env "
                   "MEMD_UPSTREAM_ANTHROPIC_URL).")
@click.option("--upstream-ollama-url", envvar="MEMD_UPSTREAM_OLLAMA_URL",
              help="The Ollama server Ollama's API (/api/chat: Open WebUI, Continue's "
                   "ollama provider) goes to (default http://127.0.0.1:11434; env "
                   "MEMD_UPSTREAM_OLLAMA_URL).")
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
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also log to this file, rotated at 5 MB, 3 kept (default: memd.log in the "
                   "user log dir, except under systemd, whose journal keeps stderr).")
@click.option("--no-log-file", is_flag=True, help="Log to stderr only.")
@click.option("--auth/--no-auth", default=None,
              help="Require an API key on every request (team mode; env MEMD_AUTH).")
@click.option("--unauthenticated", is_flag=True,
              help="Allow a non-loopback --host without --auth (anyone who can reach the "
                   "port reads and writes this memory).")
@click.pass_context
@handles_errors
def serve(ctx: click.Context, host: str | None, port: int | None, upstream_url: str | None,
          upstream_anthropic_url: str | None, upstream_ollama_url: str | None,
          upstream_api_key: str | None, db: str | None,
          context_window: int | None,
          log_level: str, log_file: Path | None, no_log_file: bool, auth: bool | None,
          unauthenticated: bool) -> None:
    """Run the daemon in the foreground: the OpenAI-compatible memory proxy and the
    native API, on 127.0.0.1 unless told otherwise."""
    import logging
    from dataclasses import replace

    import memd
    from memd.config import config_path, load_settings
    from memd.engine.background.warm import warm_in_background
    from memd.privacy.urls import redact_url
    from memd.server import listen
    from memd.server.app import create_app
    from memd.server.watch import ConfigSource

    if log_file is not None and no_log_file:
        raise InvalidInput("--log-file and --no-log-file contradict each other")
    opts = ctx.obj or {}
    flags = dict(data_dir=opts.get("data_dir"), host=host, port=port,
                 upstream_url=upstream_url, upstream_anthropic_url=upstream_anthropic_url,
                 upstream_ollama_url=upstream_ollama_url,
                 upstream_api_key=upstream_api_key, db=db or opts.get("db"), auth=auth,
                 context_window=context_window)
    settings = load_settings(opts.get("config"), **flags)
    loopback = settings.host in ("127.0.0.1", "localhost", "::1")
    if not loopback and not settings.auth and not unauthenticated:
        raise InvalidInput(f"refusing to serve {settings.host} without --auth: anyone who "
                           "can reach it could read this memory (add --auth and create keys "
                           "with 'memd key create', or pass --unauthenticated)")
    from memd.server.discovery import (
        find_daemon,
        hold_data_dir,
        remove_daemon_file,
        store_place,
        write_daemon_file,
    )

    # One daemon per data dir: two on one SQLite file starve each other's writes.
    lock = hold_data_dir(settings.data_dir)
    running = find_daemon(settings.data_dir)
    if lock is None or running is not None:
        where = "(it is starting)" if running is None else f"at {running.base_url}"
        if running is not None:
            running.close()
        raise InvalidInput(f"a memd daemon already serves {settings.data_dir} {where}: "
                           "stop it first, or give this one its own --data-dir")
    if not logging.getLogger().handlers:  # else the program running memd set logging up
        from memd.cli.service import LOG_FORMAT, log_handlers

        logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT,
                            handlers=log_handlers(log_file, no_log_file=no_log_file))
    engine = memd.open(settings=settings)
    try:
        engine.check_servable()
    except MemdError:
        engine.close()
        raise
    transport = None
    if settings.upstream_url == LOCAL_UPSTREAM:
        from memd.models.helper import llama_helper
        from memd.server.local_upstream import LocalUpstreamTransport

        # No model server: the helper's llama.cpp model answers the chats in-process.
        transport = LocalUpstreamTransport(llama_helper(settings))
        settings = replace(settings, upstream_url=LOCAL_UPSTREAM_URL)
    local_upstream = transport is not None

    def reload() -> Settings:
        """The settings as the config file now gives them, with the same flags; an
        upstream of "local" stays what the daemon started with (it is loaded once)."""
        fresh = load_settings(opts.get("config"), **flags)
        if local_upstream != (fresh.upstream_url == LOCAL_UPSTREAM):
            logging.getLogger("memd.watch").warning(
                "config: upstream_url to or from 'local' needs a restart")
        if local_upstream or fresh.upstream_url == LOCAL_UPSTREAM:
            return replace(fresh, upstream_url=settings.upstream_url)
        return fresh

    app = create_app(engine, settings, upstream_transport=transport, watch_notes=True,
                     config=ConfigSource(config_path(opts.get("config")), reload))
    log = logging.getLogger("memd")
    place = store_place(settings)
    log.info("store: %s %s; embedder: %s", "SQLite at" if place.backend == "SQLite" else
             f"{place.backend},", place.shown, engine.embedder.name)
    log.info("upstream: %s", redact_url(settings.upstream_url) if settings.upstream_url
             else "none (set --upstream-url to proxy chats; the native API works without "
             "one)")
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

    # uvicorn drains on SIGTERM (what systemd and launchd send) and SIGINT, then sends the
    # signal again to the handler it found: this one ends the process through the
    # finally below (store closed, daemon.json removed) with status 0, not killed by it.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_cleanly)
    markers: list[Path] = []

    def bound(port: int) -> None:
        # daemon.json names the port the socket got (``--port 0`` leaves it to the
        # system), and only once it is bound: a CLI that finds the file can reach it.
        markers.append(write_daemon_file(settings.data_dir, settings.host, port, place))
        log.info("memd %s listening on http://%s:%d/v1", memd.__version__, settings.host,
                 port)
        log.info("inspector: %s", inspector_link(settings, port))
        if not settings.auth:  # local mode: its one user's first search needs no load
            warm_in_background(engine.store, settings.default_user)

    try:
        listen.run(app, host=settings.host, port=settings.port, log_level=log_level,
                   on_bound=bound)
    finally:
        for marker in markers:
            remove_daemon_file(marker)
        engine.close()
        os.close(lock)  # the lock goes last: the store is closed


def inspector_link(settings: Settings, port: int) -> str:
    """What ``memd serve`` says of the web inspector: its link with the token."""
    from memd.cli.inspector import inspector_base
    from memd.ui.token import ui_token, ui_url

    if settings.auth:
        return (f"{inspector_base(settings.host, port)}/ui (run 'memd ui' with your key "
                "in MEMD_API_KEY)")
    if settings.host not in ("127.0.0.1", "localhost", "::1"):
        return "not served (only on loopback, or in team mode)"
    return ui_url(inspector_base(settings.host, port), ui_token(settings.data_dir))


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
