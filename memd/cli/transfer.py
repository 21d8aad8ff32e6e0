"""Backing up and moving a store: ``memd export`` and ``memd import`` (memd.transfer)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import click

from memd.cli.common import daemon_for, handles_errors, main, own_store_settings, progressbar
from memd.errors import InvalidInput, StorageError
from memd.private import private_file


@main.command(name="export")
@click.argument("file", required=False, default="-",
                type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--originals", is_flag=True,
              help="Also write each message's original content, secrets included (a full "
                   "backup or a move). Without it, messages hold their sanitized text.")
@click.pass_context
@handles_errors
def export_command(ctx: click.Context, file: Path, originals: bool) -> None:
    """Write the whole store to FILE (default: stdout) as JSONL: sessions, messages with
    their embeddings, memories with their vectors, facts, jobs, calls, usage and the
    embedding cache, ending with per-table row counts and checksums. Safe beside a running
    daemon (one read snapshot). Messages hold their sanitized text unless --originals."""
    from memd.transfer import export_store

    settings = own_store_settings(ctx)
    if str(file) == "-":
        sys.stdout.flush()  # UTF-8 whatever the locale: the file's bytes do not vary
        out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
        try:
            summary = export_store(settings, out, originals=originals)
        finally:
            out.flush()
            out.detach()
    else:
        partial = file.with_name(file.name + ".partial")  # no half file under FILE
        try:
            private_file(partial)  # it holds what the store holds: its owner's only
            with partial.open("w", encoding="utf-8", newline="\n") as out:
                summary = export_store(settings, out, originals=originals,
                                       progress=progressbar)
            os.replace(partial, file)
        except OSError as exc:
            raise StorageError(f"cannot write {file}: {exc}") from exc
        finally:
            partial.unlink(missing_ok=True)
    where = "stdout" if str(file) == "-" else str(file)
    click.echo(f"exported {summary.rows} rows of {len(summary.tables)} tables to {where}",
               err=True)
    if not originals:
        click.echo("messages hold their sanitized text, without secrets; --originals "
                   "writes the original contents too", err=True)


@main.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
@handles_errors
def import_command(ctx: click.Context, file: Path) -> None:
    """Import a `memd export` FILE into the configured store (created if missing). The
    whole file is checked first; rows already there identically are skipped, a different
    row under the same key stops the import before anything is written. Ends by
    comparing the store's rows with the file's checksums. Stop the daemon first."""
    from memd.transfer import import_store

    if daemon_for(ctx) is not None:
        raise InvalidInput("a memd daemon serves this data dir: stop it before importing "
                           "(it would not see rows written under it)")
    summary = import_store(own_store_settings(ctx), file, progress=progressbar)
    click.echo(f"{'table':<18}{'rows':>9}{'imported':>10}  checksum")
    for t in summary.tables:
        click.echo(f"{t.table:<18}{t.rows:>9}{t.written:>10}  {t.checksum[:16]}")
    if summary.written == 0:
        click.echo(f"nothing to import: the store already holds all {summary.rows} rows")
    else:
        click.echo(f"imported {summary.written} rows; the store matches the file's checksums")
    if not summary.originals:
        click.echo("note: this export holds no original message contents: messages were "
                   "imported with their sanitized text (secrets replaced by placeholders)")
