"""``memd doctor``: every check of :mod:`memd.doctor` in order, a line each, with the
fix of whatever is not right."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import click

from memd.cli.common import KEY_ENV, daemon_call, daemon_for, main
from memd.config import Settings
from memd.doctor import (
    FAIL,
    INFO,
    OK,
    WARN,
    Check,
    config_check,
    daemon_check,
    data_dir_check,
    embedder_check,
    helper_check,
    port_check,
    python_check,
    scrub,
    secrets_of,
    served_upstream_check,
    upstream_check,
)
from memd.doctor_store import store_check
from memd.errors import MemdError

_SHOWN = {OK: "ok", INFO: "info", WARN: "warn", FAIL: "FAIL"}


def service_check(settings: Settings) -> Check:
    """Whether memd runs as a systemd user unit or launchd agent, and on which data
    dir."""
    from memd.cli.service import manager

    mgr = manager()
    if not mgr.path.exists():
        return Check("service", INFO, f"not installed (no {mgr.path})",
                     "memd service install (runs memd from every login)")
    state = mgr.state()
    found = f"{mgr.kind} {mgr.path}: {state}"
    text = mgr.path.read_text("utf-8", errors="replace")
    if str(settings.data_dir.absolute()) not in text:
        return Check("service", WARN, f"{found}; it serves another data dir than "
                                      f"{settings.data_dir}",
                     "memd service install --data-dir <the data dir you use>")
    if state not in ("active", "running"):
        return Check("service", WARN, found,
                     f"memd service install (starts it again); its log: {mgr.log}")
    return Check("service", OK, found)


def _served(ctx: click.Context) -> tuple[str, dict[str, Any] | None] | None:
    """The base URL and ``/v1/status`` of the daemon serving this data dir and the store
    named here (any, when none is), or None without such a daemon; the status is None
    when the daemon does not tell it (it needs a key, or is of an older memd)."""
    try:
        daemon = daemon_for(ctx)
    except MemdError:  # the config or the store setting is broken: the checks say so
        return None
    if daemon is None:
        return None
    with daemon:
        base = str(daemon.base_url).rstrip("/")
        try:
            return base, daemon_call(daemon, "GET", "/v1/status")
        except MemdError:
            return base, None


def _served_checks(ctx: click.Context, settings: Settings,
                   upstream_url: str | None) -> dict[str, Callable[[Settings], Check]]:
    """The store and upstream checks of a running daemon's own, where they replace those
    of this command's settings: its upstream unless --upstream-url names one; its store
    when this command names none (it may be another than the default)."""
    served = _served(ctx)
    if served is None:
        return {}
    base, told = served
    out: dict[str, Callable[[Settings], Check]] = {}
    if told is None:
        if upstream_url is None:
            out["upstream_check"] = lambda _: Check(
                "upstream", INFO, f"the daemon at {base} does not tell its upstream without "
                                  "an API key", f"set {KEY_ENV} to one of its keys (memd key "
                                                "create --user NAME)")
        return out
    if upstream_url is None:
        key = os.environ.get(KEY_ENV)
        out["upstream_check"] = lambda _: served_upstream_check(told.get("upstream"), base,
                                                                key)
    from memd.server.discovery import served_store, store_place

    mine, theirs = store_place(settings), served_store(settings.data_dir)
    if theirs is not None and theirs.key != mine.key:
        store = told.get("store") or {}
        out["store_check"] = lambda _: Check(
            "store", OK, f"the daemon's: {store.get('backend')}, {store.get('place')}, "
                         f"schema v{store.get('schema')} (this command names no store)")
    return out


def _checks(ctx: click.Context, port: int | None, upstream_url: str | None) -> Iterator[Check]:
    opts = ctx.obj or {}
    yield python_check()
    found, settings = config_check(opts.get("config"), data_dir=opts.get("data_dir"),
                                   db=opts.get("db"), port=port, upstream_url=upstream_url)
    if settings is None:
        yield found
        return
    secrets = secrets_of(settings)
    yield scrub(found, secrets)
    served = _served_checks(ctx, settings, upstream_url)
    for check_of in (data_dir_check, store_check, embedder_check, helper_check,
                     upstream_check, port_check, daemon_check, service_check):
        run = served.get(check_of.__name__, check_of)
        try:
            check = run(settings)
        except Exception as exc:  # noqa: BLE001 - a broken check must not hide the rest
            name = check_of.__name__.removesuffix("_check").replace("_", " ")
            check = Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: "
                                      f"{exc}", "reinstall memd (./install.sh); if it "
                                                "persists, report it with this output")
        yield scrub(check, secrets)


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {check, status, detail, fix}; status is ok, info, "
                   "warn or fail.")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Check this port rather than the configured one (as memd serve --port).")
@click.option("--upstream-url",
              help="Check this upstream rather than the configured one (as memd serve "
                   "--upstream-url).")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, port: int | None,
           upstream_url: str | None) -> None:
    """Check what memd needs and say how to fix what is wrong.

    In order: Python and memd, the config file, the data dir, the store (SQLite and
    sqlite-vec, or PostgreSQL and pgvector; its schema), the embedder, the helper model,
    the upstream model server and its models, the port, a running daemon and the
    service. A line each: ok, info, warn or FAIL, what was found, and under anything
    not ok a 'fix:' line. Changes nothing. Exits 1 when a check fails, else 0.

    \b
    Example:
      memd doctor --upstream-url http://127.0.0.1:11434/v1
    """
    found = []
    for check in _checks(ctx, port, upstream_url):
        found.append(check)
        if not as_json:
            click.echo(f"{_SHOWN[check.status]:<4}  {check.check}: {check.detail}")
            if check.fix and check.status != OK:
                label = "hint" if check.status == INFO else "fix"
                click.echo(f"      {label}: {check.fix}")
    if as_json:
        click.echo(json.dumps([asdict(c) for c in found], indent=2))
    failed = sum(c.status == FAIL for c in found)
    if not as_json:
        click.echo(f"{failed} check(s) failed" if failed else "no check failed")
    ctx.exit(1 if failed else 0)
