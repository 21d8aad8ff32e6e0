"""``memd import-history``: learn from the conversations a client already kept on disk
(:mod:`memd.imports`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memd.cli.common import handles_errors, main, open_engine, progressbar, store_user
from memd.errors import InvalidInput

if TYPE_CHECKING:
    from memd.engine.memory import Memd
    from memd.imports import ImportCounts, Source


def _source_names() -> list[str]:
    from memd.imports import SOURCES

    return sorted(SOURCES)


@main.command(name="import-history")
@click.argument("source", type=click.Choice(_source_names()), metavar="SOURCE")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path), metavar="[PATH]...")
@click.option("--user", "user_id", help="The user the history belongs to (default: the "
                                        "user of MEMD_API_KEY, else the default user).")
@click.option("--watch", is_flag=True,
              help="After importing, keep importing the new turns the client writes "
                   "(for a client that does not go through memd's proxy); Ctrl-C stops.")
@click.option("--dry-run", is_flag=True,
              help="Print what would be imported, per source and workspace; write nothing.")
@click.pass_context
@handles_errors
def import_history(ctx: click.Context, source: str, paths: tuple[Path, ...],
                   user_id: str | None, watch: bool, dry_run: bool) -> None:
    """Import the history of a client: its conversations become sessions, learnt from
    as live traffic is (the user's own words only; tool output and the client's text
    never become memory), at their original times.

    SOURCE is one of claude-code, chatgpt, claude-ai, aider, continue, cline, opencode.
    PATH is a file or folder of that client's history; without one, its usual place on
    this machine (~/.claude/projects, ~/.continue/sessions, Cline's VS Code storage,
    ~/.local/share/opencode, ./.aider.chat.history.md, ./conversations.json for the
    ChatGPT and Claude.ai exports).

    Importing again adds only what is new: the same file adds nothing, a grown one its
    new turns."""
    from memd.imports import import_conversations, plan_import
    from memd.imports import source as source_named

    src = source_named(source)
    roots = [p.expanduser().absolute() for p in paths] or [
        p for p in src.defaults() if p.exists()]
    if not roots:
        where = ", ".join(str(p) for p in src.defaults())
        raise InvalidInput(f"no {source} history found at {where}: give its PATH")
    conversations = list(src.conversations(roots))
    with open_engine(ctx) as engine:
        user = store_user(engine, user_id)
        plan = plan_import(engine, user, conversations)
        if dry_run or plan.turns == 0:
            _print_plan(plan, dry_run)
            if watch and not dry_run:
                _watch(engine, user, src, roots)
            return
        started = time.monotonic()
        with progressbar("importing", plan.turns) as advance:
            done = 0

            def step(turns: int) -> None:
                nonlocal done
                done += turns
                rate = done / max(time.monotonic() - started, 1e-6)
                advance(turns, f"{rate:,.0f} turns/s")

            counts = import_conversations(engine, user, conversations, progress=step,
                                          run_jobs=True, passages_later=True)
        took = time.monotonic() - started
        click.echo(f"imported {counts.messages} messages of {counts.turns} new turns "
                   f"({counts.sessions} new sessions, {counts.skipped} turns skipped) in "
                   f"{took:.1f} s, {counts.turns / max(took, 1e-6):,.0f} turns/s; "
                   "searchable now")
        _refine(engine)
        if watch:
            _watch(engine, user, src, roots)


def _refine(engine: Memd) -> None:
    """Run what the import left queued: the passages of its messages, which sharpen how
    search ranks them. Interrupted, the jobs stay queued (durable) for the daemon's
    worker."""
    click.echo("embedding passages (Ctrl-C leaves them to the daemon)", err=True)
    while engine.jobs.run_due():
        pass


def _watch(engine: Memd, user: str, src: Source, roots: list[Path]) -> None:
    """Import new turns as the client writes them, until interrupted."""
    from memd.imports.watch import HistoryWatcher

    def reported(counts: ImportCounts) -> None:
        click.echo(f"{time.strftime('%H:%M:%S')} imported {counts.messages} messages "
                   f"of {counts.conversations} conversations")

    watcher = HistoryWatcher(engine, user, src, [r for r in roots if r.is_dir()]
                             or [r.parent for r in roots], reported)
    click.echo(f"watching {', '.join(str(r) for r in roots)} (Ctrl-C stops)", err=True)
    watcher.start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()


def _print_plan(plan: ImportCounts, dry_run: bool) -> None:
    if plan.turns == 0:
        click.echo(f"nothing to import: all {plan.conversations} conversations are "
                   "imported already" if plan.conversations else "no conversations found")
        return
    click.echo(f"{'source':<12}{'workspace':<28}{'conversations':>14}{'new turns':>11}")
    for (src, ws), (convs, turns) in sorted(plan.by_workspace.items(),
                                           key=lambda kv: (kv[0][0], kv[0][1] or "")):
        click.echo(f"{src:<12}{ws or '-':<28}{convs:>14}{turns:>11}")
    if dry_run:
        click.echo(f"{plan.turns} new turns in {plan.conversations} conversations "
                   f"({plan.sessions} new sessions); dry run: nothing written")
