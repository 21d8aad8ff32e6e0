"""The SQLite side of ``memd migrate``: one read transaction over the source data dir.

Kept apart from the PostgreSQL side: it needs no psycopg, and it merges the sqlite-vec
tables' vectors into their rows.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.errors import InvalidInput
from memd.migrate.canon import Column
from memd.migrate.tables import Table

if TYPE_CHECKING:
    import apsw


class Source:
    """The SQLite side, read in one read transaction (a consistent snapshot)."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        """``key``: the source's key, when it is encrypted."""
        import apsw
        import sqlite_vec

        from memd.backends.sqlite.cipher import connect

        if not path.is_file():
            raise InvalidInput(f"no memd database at {path}")
        self.path = path
        try:
            db = connect(str(path), key, apsw.SQLITE_OPEN_READWRITE)
            db.enable_load_extension(True)
            db.load_extension(sqlite_vec.loadable_path())
            db.enable_load_extension(False)
            db.set_busy_timeout(10_000)
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_meta'"
                              ).fetchall():
                raise InvalidInput(f"{path} is not a memd database")
            row = db.execute("SELECT value FROM schema_meta WHERE key = 'dim'").fetchone()
        except apsw.Error as exc:
            raise InvalidInput(f"cannot read {path} as a memd database: {exc}") from exc
        self.dim = int(row[0]) if row else 384
        # Bring an older data dir to the current schema, as any memd command would.
        from memd.backends.sqlite import SQLiteStore

        SQLiteStore(path, dim=self.dim, key=key).close()
        self.db: apsw.Connection = db
        db.execute("BEGIN")
        self.tables = {name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        self.db.execute("COMMIT")
        self.db.close()

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f'PRAGMA table_info("{table}")')]

    def count(self, table: str) -> int:
        ((n,),) = self.db.execute(f'SELECT count(*) FROM "{table}"').fetchall()
        return int(n or 0)

    def months(self, table: str, column: str) -> list[float]:
        """Epoch starts (UTC) of the months ``column`` falls in."""
        rows = self.db.execute(
            f"SELECT DISTINCT CAST(strftime('%Y', \"{column}\", 'unixepoch') AS INTEGER), "
            f"CAST(strftime('%m', \"{column}\", 'unixepoch') AS INTEGER) FROM \"{table}\""
        )
        return [float(calendar.timegm((y, m, 1, 0, 0, 0))) for y, m in rows if y is not None]

    def rows(self, spec: Table, cols: list[Column]) -> Iterator[list[Any]]:
        """The table's rows as raw values in ``cols`` order, vectors merged in."""
        plain = [c for c in cols if c.vectors is None]
        vec = [c for c in cols if c.vectors is not None]
        query = f'SELECT {", ".join(c.source or "" for c in plain)} FROM "{spec.origin}" t'
        if not vec:
            for r in self.db.execute(query):
                yield list(r)
            return
        assert vec[0].vectors is not None
        id_col = vec[0].vectors.key
        id_at = [c.name for c in plain].index(id_col)
        query += f' ORDER BY t."{id_col}"'
        streams: list[Iterator[tuple[str, bytes]]] = []
        for c in vec:
            vs = c.vectors
            assert vs is not None
            cur = self.db.cursor()  # a cursor each: the streams interleave
            streams.append(iter(cur.execute(
                f'SELECT "{vs.key}", "{vs.column}" FROM "{vs.table}" ORDER BY 1')))
        heads: list[tuple[str, bytes] | None] = [next(s, None) for s in streams]
        at = {c.name: i for i, c in enumerate(plain)}
        for r in self.db.cursor().execute(query):
            key = r[id_at]
            found: dict[str, bytes | None] = {}
            for i, c in enumerate(vec):
                head = heads[i]
                while head is not None and head[0] < key:  # orphans: no row, not copied
                    head = next(streams[i], None)
                heads[i] = head
                found[c.name] = head[1] if head is not None and head[0] == key else None
            yield [found[c.name] if c.vectors is not None else r[at[c.name]] for c in cols]
