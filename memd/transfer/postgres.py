"""The PostgreSQL side of export and import.

Exporting reads in one REPEATABLE READ, READ ONLY transaction: one snapshot of every
table, safe beside daemons writing. Importing copies through memd migrate's target
(binary COPY, one user's rows per batch and transaction, so a batch routes to that user's
partitions only); the trigger that keeps messages' keyword vectors runs on COPY, and the
generated full-text columns fill themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from memd.errors import StorageError
from memd.migrate.canon import Column, column_kind
from memd.migrate.tables import TABLES
from memd.transfer.lines import Layout, raw_bytes

_BATCH = 2000


@contextmanager
def _translated(what: str) -> Iterator[None]:
    import psycopg

    from memd.migrate.target import translate_error

    try:
        yield
    except psycopg.Error as exc:
        raise translate_error(exc, what) from exc


class PostgresSide:
    kind = "postgres"

    def __init__(self, dsn: str) -> None:
        import psycopg

        from memd.migrate.target import Target
        from memd.privacy.urls import redact_dsn

        self.where = redact_dsn(dsn)
        try:
            self.target = Target(dsn)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to {self.where}: {exc}") from exc
        self.oids: dict[tuple[str, str], int] = {}
        with _translated(f"reading {self.where}"):
            if self.target.conn.execute("SELECT to_regclass('schema_meta')").fetchone() \
                    in (None, (None,)):
                self.target.close()
                raise StorageError(f"{self.where} holds no memd store")
            self.layouts = [lay for t in TABLES if (lay := self._layout(t.name)) is not None]
            row = self.target.conn.execute(
                "SELECT value FROM schema_meta WHERE key = 'dim'").fetchone()
            self.dim = int(row[0]) if row else 384
            self.target.conn.commit()
        # Every later read sees one snapshot (an import only reads between its writes).
        self.target.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    def close(self) -> None:
        self.target.close()

    def _layout(self, table: str) -> Layout | None:
        spec = next(t for t in TABLES if t.name == table)
        cols = []
        for name, oid, pg_type, generated in self.target.columns(table):
            if generated or pg_type == "tsvector":  # derived by PostgreSQL itself
                continue
            cols.append((name, column_kind(pg_type, f"{table}.{name}")))
            self.oids[(table, name)] = oid
        return Layout(spec, tuple(cols)) if cols else None

    def count(self, layout: Layout) -> int:
        from psycopg import sql

        with _translated(f"reading {self.where}"):
            row = self.target.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(layout.spec.name))).fetchone()
        return int(row[0]) if row else 0

    def rows(self, layout: Layout) -> Iterator[list[Any]]:
        """The table's stored values in key order (JSON selected as text)."""
        from psycopg import sql

        ident = sql.Identifier
        kinds = dict(layout.columns)
        select = sql.SQL(", ").join(
            sql.SQL("{}::text").format(ident(n)) if k == "json" else ident(n)
            for n, k in layout.columns)
        query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
            select, ident(layout.spec.name),
            sql.SQL(", ").join(sql.SQL('{} COLLATE "C"').format(ident(k))
                               if kinds[k] == "text" else ident(k) for k in layout.spec.key))
        with _translated(f"reading {layout.spec.name} from {self.where}"), \
                self.target.conn.cursor(f"memd_read_{layout.spec.name}", binary=True) as cur:
            cur.itersize = _BATCH
            cur.execute(query)
            for r in cur:
                yield list(r)

    def end_read(self) -> None:
        with _translated(f"reading {self.where}"):
            self.target.conn.commit()

    def writing(self) -> AbstractContextManager[None]:
        """Nothing around the batches: each is a transaction of its own."""
        return nullcontext()

    def write(self, layout: Layout, rows: Iterable[dict[str, Any]]) -> int:
        """Copy rows (the file's values) in batches of one user's rows; returns how many."""
        spec = layout.spec
        cols = [Column(n, self.oids[(spec.name, n)], k, None) for n, k in layout.columns]
        self.end_read()
        batches: dict[Any, list[list[Any]]] = {}
        n = 0
        for row in rows:
            batch = batches.setdefault(row.get("user_id"), [])
            batch.append([_decode(k, row[name]) for name, k in layout.columns])
            if len(batch) >= _BATCH:
                self.target.copy(spec, cols, batch)
                n += len(batch)
                batch.clear()
        for batch in batches.values():
            if batch:
                self.target.copy(spec, cols, batch)
                n += len(batch)
        return n


def _decode(kind: str, value: Any) -> Any:
    """A file value as the COPY value of its column."""
    if value is None:
        return None
    if kind == "vector":
        import numpy as np

        return np.frombuffer(raw_bytes(value), dtype="<f4")
    if kind == "bytes":
        return raw_bytes(value)
    if kind == "json":
        from psycopg.types.json import Jsonb

        return Jsonb(value)
    return value
