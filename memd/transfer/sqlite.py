"""The SQLite side of export and import.

Exporting reads through memd migrate's source (one read transaction: a consistent
snapshot, safe beside a daemon writing in WAL mode). Importing writes through the store's
own connection in one transaction. The store keeps its full-text rows (FTS5) and vectors
(sqlite-vec) in code rather than in triggers, so an imported memory or message gets its
index rows here, as :meth:`SQLiteStore.insert_memory` and ``append`` would make them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw
import numpy as np

from memd.backends.sqlite.fulltext import memory_index_row, message_index_row
from memd.errors import StorageError
from memd.migrate.tables import TABLES
from memd.transfer.lines import Layout, raw_bytes

if TYPE_CHECKING:
    from memd.backends.sqlite import SQLiteStore


def _q(name: str) -> str:
    return f'"{name}"'


class SQLiteSide:
    kind = "sqlite"

    def __init__(self, db: apsw.Connection, dim: int, store: SQLiteStore | None = None,
                 close: Any = None) -> None:
        self.db, self.dim, self.store, self._close = db, dim, store, close
        present = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self.layouts = [self._layout(t.name) for t in TABLES
                        if t.source is None and t.name in present]

    @classmethod
    def reader(cls, path: Path, key: str | None = None) -> SQLiteSide:
        """A read snapshot of the memd database at ``path`` (``key``: its key, when it
        is encrypted)."""
        from memd.migrate.source import Source

        src = Source(path, key)
        return cls(src.db, src.dim, close=src.close)

    @classmethod
    def writer(cls, store: SQLiteStore) -> SQLiteSide:
        return cls(store.connection.driver, store.dim, store)

    def close(self) -> None:
        if self._close is not None:
            self._close()
        elif self.store is not None:
            self.store.close()

    def _layout(self, table: str) -> Layout:
        spec = next(t for t in TABLES if t.name == table)
        cols = [(str(r[1]), "bytes" if str(r[2]).upper() == "BLOB" else "value")
                for r in self.db.execute(f"PRAGMA table_info({_q(table)})")]
        cols += [(name, "vector") for name in spec.vectors]
        return Layout(spec, tuple(cols))

    def count(self, layout: Layout) -> int:
        row = self.db.execute(f"SELECT count(*) FROM {_q(layout.spec.name)}").fetchone()
        return int(row[0]) if row else 0

    def rows(self, layout: Layout) -> Iterator[list[Any]]:
        """The table's stored values in key order, each vector read from its vec0 table."""
        spec = layout.spec
        select = []
        for name, kind in layout.columns:
            if kind == "vector":
                v = spec.vectors[name]
                select.append(f"(SELECT v.{_q(v.column)} FROM {_q(v.table)} v "
                              f"WHERE v.{_q(v.key)} = t.{_q(v.key)})")
            else:
                select.append(f"t.{_q(name)}")
        order = ", ".join(f"t.{_q(k)}" for k in spec.key)
        query = f"SELECT {', '.join(select)} FROM {_q(spec.name)} t ORDER BY {order}"
        try:
            for r in self.db.cursor().execute(query):
                yield list(r)
        except apsw.Error as exc:
            raise StorageError(f"SQLite: reading {spec.name}: {exc}") from exc

    def end_read(self) -> None:
        """Nothing to end: an import reads and writes on the store's connection."""

    def writing(self) -> AbstractContextManager[None]:
        """The import's one transaction."""
        assert self.store is not None, "opened for reading"
        return self.store.transaction()

    def write(self, layout: Layout, rows: Iterable[dict[str, Any]]) -> int:
        """Insert rows (the file's values) with their index rows; the caller holds the
        transaction. Returns how many."""
        spec = layout.spec
        plain = [n for n, k in layout.columns if k != "vector"]
        insert = (f"INSERT INTO {_q(spec.name)} ({', '.join(map(_q, plain))}) "
                  f"VALUES ({', '.join('?' for _ in plain)})")
        kinds = dict(layout.columns)
        n = 0
        try:
            for row in rows:
                self.db.execute(insert, [raw_bytes(row[c]) if kinds[c] == "bytes"
                                         and row[c] is not None else row[c] for c in plain])
                self._index(spec.name, self.db.last_insert_rowid(), row)
                n += 1
        except apsw.Error as exc:
            raise StorageError(f"SQLite: writing {spec.name}: {exc}") from exc
        return n

    def _index(self, table: str, rowid: int, row: dict[str, Any]) -> None:
        """The full-text and vector rows the store keeps for a memory or a message, made
        by the store's own code."""
        store = self.store
        assert store is not None, "opened for reading"
        vector = (np.frombuffer(raw_bytes(row["embedding"]), dtype=np.float32)
                  if row.get("embedding") is not None else None)
        if table == "memories":
            self.db.execute(*memory_index_row(row["user_id"], row["memory_id"],
                                              row["content_text"], rowid))
            if vector is not None:
                store.vectors.put_memory_vector(row["memory_id"], row["user_id"],
                                                row["workspace"], bool(row["is_active"]), vector)
        elif table == "messages":
            text = row["sanitized"] if row["sanitized"] is not None else row["content"]
            indexed = message_index_row(row["user_id"], row["session_id"], row["message_id"],
                                        text, rowid)
            if indexed is not None:
                self.db.execute(*indexed)
                store.words.added(row["user_id"], row["message_id"], text, rowid)
            if vector is not None:
                store.set_message_embeddings(row["user_id"], [(row["message_id"], vector)])
