"""What every part of a store is built on: the store's connection (:class:`SqlConnection`,
one per store, its dialect's spellings and its driver's way to run a statement) and
:class:`Part`, the base of the small per-role objects a store is composed of.

A part holds the connection's few operations as its own attributes, so the SQL of a role
reads as it would inside the store (``self._rows(...)``, ``self._write(...)``), while the
part itself stays readable alone: its constructor names everything it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from memd.backends.common.dialect import Dialect
from memd.backends.common.migrations import COPYING_KEY, DEFERRED_INDEX_KEY, UNFINISHED_PREFIX
from memd.backends.common.rows import RowMappers


class SqlConnection:
    """A store's connection: ``rows`` (read rows), ``write`` (one write, returns rows
    changed), ``write_many`` (one statement over many parameter rows), ``write_new`` (an
    insert of a fresh id, which cannot conflict) and ``transaction``; ``dialect``, ``map``
    and ``json`` are its driver's spellings, row mappers and JSON parameter. Each backend
    subclasses it once; the schema's state is read here, the same on both. It is the
    store's :class:`~memd.backends.base.Lifecycle` too."""

    dialect: Dialect
    map: RowMappers
    json: Callable[[Any], Any]
    dim: int
    #: Whether side reads run in parallel with the caller's, and side writes (see
    #: base.Lifecycle).
    concurrent_reads: bool
    concurrent_writes: bool

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def write(self, query: str, params: Sequence[Any] = ()) -> int:
        raise NotImplementedError

    def write_many(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def write_new(self, query: str, params: Sequence[Any]) -> int:
        return self.write(query, params)

    def transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    # The rest of memd.backends.base.Lifecycle, which the store takes from here.
    def close(self) -> None:
        raise NotImplementedError

    def in_transaction(self) -> bool:
        raise NotImplementedError

    def side_reads(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def read_batch(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def check_row_security(self) -> None:
        raise NotImplementedError

    def ensure_history_partitions(self, now: float, months: int = 3) -> int:
        raise NotImplementedError

    def schema_version(self) -> int:
        return int(self.rows("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0])

    def unfinished_copy(self) -> list[str]:
        rows = self.rows(self.dialect.sql("SELECT key, value FROM schema_meta WHERE key LIKE ?"),
                         (UNFINISHED_PREFIX + "%",))
        tables: set[str] = set()
        for key, value in rows:
            if key == COPYING_KEY:
                tables.update(t for t in str(value or "").split(",") if t)
            elif str(key).startswith(DEFERRED_INDEX_KEY):
                tables.add(str(key)[len(DEFERRED_INDEX_KEY):].split(".")[0])
        return sorted(tables)


class Part:
    """One role's share of a store over the store's connection: the SQL is written with
    ``?`` marks (``self._sql`` swaps them) and the dialect's spellings."""

    def __init__(self, conn: SqlConnection) -> None:
        self._dialect = conn.dialect
        self._map = conn.map
        self._json = conn.json
        self._rows = conn.rows
        self._write = conn.write
        self._write_many = conn.write_many
        self._write_new = conn.write_new
        self.transaction = conn.transaction

    def _sql(self, text: str) -> str:
        return self._dialect.sql(text)
