"""The PostgreSQL side of ``memd migrate``: digests of the target rows, deferred vector
indexes and the binary COPY of one batch.

Target rows are read one user at a time and a batch holds one user's rows, so that a
statement touches that user's partitions only, not the thousands of a production layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memd.backends.common.migrations import COPYING_KEY, DEFERRED_INDEX_KEY
from memd.errors import Conflict, MemdError, MigrationError, StorageError
from memd.migrate.canon import Column, canon_target, row_digest
from memd.migrate.tables import Table

if TYPE_CHECKING:
    import psycopg

# Vector indexes are built much faster in bulk than row by row, so copying
# into an empty table drops them first and builds them after its last batch. Their
# definitions wait in schema_meta under this prefix, so a killed run's rerun rebuilds them.
_DEFERRED_AMS = ("hnsw", "ivfflat")
_DEFERRED_KEY = DEFERRED_INDEX_KEY
_DEFER_MAX_RELATIONS = 2000  # tables and indexes of a partition tree


def mark_copying(dsn: str, tables: Sequence[str]) -> bool:
    """Record in the target, before anything else is written to it (its schema
    included), that a copy of ``tables`` into it is under way, so that ``memd serve``
    refuses a target a killed run left, however little it holds. Returns whether this
    run made the record (a killed run's stays as it was)."""
    import psycopg

    from memd.backends.postgres.schema import SCHEMA_META

    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA_META)
            cur = conn.execute("INSERT INTO schema_meta (key, value) VALUES (%s, %s) "
                               "ON CONFLICT (key) DO NOTHING", (COPYING_KEY, ",".join(tables)))
            return cur.rowcount == 1
    except psycopg.Error as exc:
        raise StorageError(f"cannot open the PostgreSQL store: {exc}") from exc


class Target:
    def __init__(self, dsn: str) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        self.conn: psycopg.Connection[Any] = psycopg.connect(dsn)
        register_vector(self.conn)
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def columns(self, table: str) -> list[tuple[str, int, str, bool]]:
        rows = self.conn.execute(
            "SELECT attname, atttypid::int, format_type(atttypid, atttypmod), "
            "attgenerated <> '' FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,),
        ).fetchall()
        self.conn.commit()
        return [(str(n), int(o), str(t), bool(g)) for n, o, t, g in rows]

    def digests(self, spec: Table, cols: list[Column], keys: Sequence[tuple[Any, ...]],
                advance: Callable[[int], None]) -> dict[tuple[Any, ...], list[bytes]]:
        """Digests of the target rows whose keys are in ``keys``, by key. One user at a
        time, each in its own transaction: a query naming its user touches (and locks)
        one hash partition, not the thousands of a production layout."""
        out: dict[tuple[Any, ...], list[bytes]] = {}
        for user, group in _by_user(spec, keys).items():
            self._digest_group(spec, cols, user, group, out, advance)
        return out

    def _digest_group(self, spec: Table, cols: list[Column], user: str | None,
                      keys: Sequence[tuple[Any, ...]], out: dict[tuple[Any, ...], list[bytes]],
                      advance: Callable[[int], None]) -> None:
        from psycopg import sql

        key_cols = [next(c for c in cols if c.name == k) for k in spec.key]
        key_at = [[c.name for c in cols].index(k) for k in spec.key]
        ident = sql.Identifier
        with self.conn.transaction():
            self.conn.execute(sql.SQL(
                "CREATE TEMP TABLE memd_keys ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA"
            ).format(sql.SQL(", ").join(map(ident, spec.key)), ident(spec.name)))
            with self.conn.cursor() as cur, cur.copy(
                sql.SQL("COPY memd_keys ({}) FROM STDIN (FORMAT BINARY)").format(
                    sql.SQL(", ").join(map(ident, spec.key)))
            ) as copy:
                copy.set_types([c.oid for c in key_cols])
                for k in keys:
                    copy.write_row(k)
            self.conn.execute("ANALYZE memd_keys")
            select = sql.SQL(", ").join(
                sql.SQL("t.{}::text").format(ident(c.name)) if c.kind == "json"
                else sql.SQL("t.{}").format(ident(c.name)) for c in cols
            )
            query = sql.SQL("SELECT {} FROM {} t JOIN memd_keys USING ({})").format(
                select, ident(spec.name), sql.SQL(", ").join(map(ident, spec.key)))
            if user is not None:  # a constant, so that the plan prunes partitions
                query = sql.SQL("{} WHERE t.user_id = {}").format(query, sql.Literal(user))
            kinds = [c.kind for c in cols]
            with self.conn.cursor("memd_migrate_read", binary=True) as cur:
                cur.itersize = 2000
                cur.execute(query)
                n = 0
                for r in cur:
                    values = [canon_target(k, v) for k, v in zip(kinds, r, strict=True)]
                    out.setdefault(tuple(r[i] for i in key_at), []).append(row_digest(values))
                    n += 1
                    if n % 1000 == 0:
                        advance(1000)
                advance(n % 1000)

    def unmark(self) -> None:
        """The copy is whole (or this run wrote nothing): forget :func:`mark_copying`'s
        record."""
        self.conn.execute("DELETE FROM schema_meta WHERE key = %s", (COPYING_KEY,))
        self.conn.commit()

    def deferred(self, table: str) -> dict[str, str]:
        """Vector indexes of ``table`` an earlier run dropped and has not rebuilt yet."""
        prefix = f"{_DEFERRED_KEY}{table}."
        rows = self.conn.execute(
            "SELECT key, value FROM schema_meta WHERE starts_with(key, %s)", (prefix,)
        ).fetchall()
        self.conn.commit()
        return {str(k): str(v) for k, v in rows}

    def defer_indexes(self, table: str) -> dict[str, str]:
        """Drop the vector indexes of ``table`` if it is empty, recording their definitions
        in schema_meta first (one transaction); returns what was deferred."""
        from psycopg import sql

        with self.conn.transaction():
            # Only for a small partition tree: dropping and building an index on the
            # parent locks every leaf's, and thousands would exhaust the lock table.
            ((size,),) = self.conn.execute(
                "SELECT count(*) * (1 + (SELECT count(*) FROM pg_index "
                "WHERE indrelid = to_regclass(%s))) FROM pg_partition_tree(to_regclass(%s))",
                (table, table)).fetchall()
            if size > _DEFER_MAX_RELATIONS or self.conn.execute(
                sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(table))
            ).fetchone():
                return {}
            found = self.conn.execute(
                "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index x "
                "JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_am a ON a.oid = c.relam "
                "WHERE x.indrelid = to_regclass(%s) AND a.amname = ANY(%s)",
                (table, list(_DEFERRED_AMS)),
            ).fetchall()
            out = {f"{_DEFERRED_KEY}{table}.{name}": str(ddl) for name, ddl in found}
            for key, ddl in out.items():
                self.conn.execute("INSERT INTO schema_meta (key, value) VALUES (%s, %s) "
                                  "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                                  (key, ddl))
            for name, _ in found:
                self.conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        return out

    def rebuild_indexes(self, deferred: Mapping[str, str]) -> None:
        """Create the deferred indexes again (a bulk build) and forget their records."""
        for key, ddl in deferred.items():
            # the parent's definition reads "ON ONLY t"; on the parent it makes every leaf's
            ddl = ddl.replace(" ON ONLY ", " ON ", 1).replace(
                "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
            with self.conn.transaction():
                self.conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
                self.conn.execute(ddl.encode())
                self.conn.execute("DELETE FROM schema_meta WHERE key = %s", (key,))

    def copy(self, spec: Table, cols: list[Column], rows: list[list[Any]]) -> None:
        """Copy one batch in one transaction."""
        import psycopg
        from psycopg import sql

        ident = sql.Identifier
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            ident(spec.name), sql.SQL(", ").join(ident(c.name) for c in cols))
        try:
            with self.conn.transaction(), self.conn.cursor() as cur, cur.copy(query) as copy:
                copy.set_types([c.oid for c in cols])
                for r in rows:
                    copy.write_row(r)
        except psycopg.Error as exc:  # name the row PostgreSQL refused ("COPY t, line N")
            what = f"copying {spec.name}"
            line = re.search(r"line (\d+)", exc.diag.context or "")
            if line and 0 < int(line[1]) <= len(rows):
                row = rows[int(line[1]) - 1]
                names = [c.name for c in cols]
                what += f" {dict((k, row[names.index(k)]) for k in spec.key)}"
            raise translate_error(exc, what) from exc


def translate_error(exc: Exception, what: str) -> MemdError:
    import psycopg

    if isinstance(exc, psycopg.errors.UniqueViolation):
        return Conflict(f"{what}: the target gained rows with the same keys meanwhile: {exc}")
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return MigrationError(f"{what}: PostgreSQL refused a row: {exc}")
    return StorageError(f"{what}: {exc}")


def _by_user(spec: Table, keys: Iterable[tuple[Any, ...]]) -> dict[str | None, list[Any]]:
    """Keys grouped by their user_id (one group, None, if the table has no user)."""
    at = spec.key.index("user_id") if "user_id" in spec.key else None
    groups: dict[str | None, list[Any]] = {}
    for k in keys:
        groups.setdefault(None if at is None else k[at], []).append(k)
    return groups
