"""The PostgreSQL schema: sql/postgres/NNN_*.sql applied in order, each in a transaction,
under an advisory lock so that concurrent starts apply each file once; then the
partitions of the recorded layout and the history's monthly partitions, made a few per
transaction (thousands of tables in one transaction would exhaust the lock table)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from memd.backends.common.migrations import check_dim, pending
from memd.errors import MigrationError

Conn = psycopg.Connection[TupleRow]
MIGRATION_LOCK = 0x6D656D64  # pg_advisory_xact_lock key ("memd") serializing migrations
HISTORY_MONTHS = 3  # monthly history partitions kept ready: this month and the next two
PARTITION_BATCH = 16  # partitions made per transaction (each locks its indexes till commit)


def month(ts: float) -> tuple[int, int]:
    t = time.gmtime(ts)
    return t.tm_year, t.tm_mon


# The database's own facts (dimension, partition counts, an unfinished copy's records):
# made before any migration, so that ``memd migrate`` can mark a target first thing.
SCHEMA_META = "CREATE TABLE IF NOT EXISTS schema_meta (key text PRIMARY KEY, value text)"


def migrate(conn: Conn, dim: int, partitions: tuple[int, int, int], where: str
            ) -> tuple[int, int, int]:
    """Apply the migrations ``where`` (a database, as errors name it) lacks, then make
    the layout's missing partitions (resuming where an interrupted start stopped).
    Returns the partition counts: ``partitions`` for a new database, else the ones it
    was made with."""
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at double precision NOT NULL "
                "DEFAULT extract(epoch FROM clock_timestamp()))"
            )
            conn.execute(SCHEMA_META)
            meta: dict[str, str] = dict(
                conn.execute("SELECT key, value FROM schema_meta").fetchall()
            )
            applied = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
    except psycopg.Error as exc:
        raise MigrationError(f"cannot read the schema version of {where}: {exc}") from exc
    check_dim(meta.get("dim"), dim, where, "database")
    if "partitions" in meta:  # fixed when the tables were made
        s, m, h = (int(p) for p in meta["partitions"].split(","))
        partitions = (s, m, h)
    fill = {
        "{dim}": str(dim), "{sessions_partitions}": str(partitions[0]),
        "{memory_partitions}": str(partitions[1]),
        "{history_partitions}": str(partitions[2]),
    }
    for migration in pending("postgres", applied, where):
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                if conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,)
                ).fetchone():
                    continue  # another process applied it meanwhile
                conn.execute(migration.text(fill).encode("utf-8"))
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO schema_meta (key, value) VALUES (%s, %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        [("dim", str(dim)),
                         ("partitions", ",".join(str(p) for p in partitions))],
                    )
        except psycopg.Error as exc:
            raise MigrationError(
                f"migration {migration.name} failed on {where}: {exc}") from exc
    try:
        while locked_batch(conn, "SELECT memd_add_partitions(%s)", (PARTITION_BATCH,)):
            pass
    except psycopg.Error as exc:
        raise MigrationError(f"cannot create the partitions of {where}: {exc}") from exc
    return partitions


def locked_batch(conn: Conn, query: str, params: Sequence[Any]) -> int:
    """Run one batch of partition DDL (a function returning how many partitions it
    made) in its own transaction, under the migration lock; returns the count."""
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '10s'")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        row = conn.execute(query, params).fetchone()
    return int(row[0]) if row else 0


def add_history_months(conn: Conn, now: float, months: int) -> int:
    """Make the monthly history partitions from ``now``'s month on; returns how many."""
    made = 0
    while n := locked_batch(conn, "SELECT memd_ensure_history_months(%s, %s, %s)",
                            (now, months, PARTITION_BATCH)):
        made += n
    return made
