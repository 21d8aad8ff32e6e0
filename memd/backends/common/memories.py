"""The reads of memories both dialects write alike; each backend's memories part adds the
writes (which keep its indexes in step), the filter and retrieval's channels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memd.backends.common.columns import MEMORY_COLUMNS, MEMORY_ORDERS
from memd.backends.common.connection import Part
from memd.types import Memory, MemoryFilter


class SharedMemories(Part):
    """Memories: plain reads, counts and entity links.

    ``_memory_rows`` names what memories with their stats are read from."""

    _memory_rows: str = "memories"

    def _where(self, user_id: str, flt: MemoryFilter) -> tuple[str, list[Any]]:
        """SQL for ``flt`` over memories (bare column names) and its parameters."""
        raise NotImplementedError

    def get_memory(self, user_id: str, memory_id: str) -> Memory | None:
        rows = self._rows(self._sql(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} "
            "WHERE user_id = ? AND memory_id = ?"), (user_id, memory_id))
        return self._map.memory(rows[0]) if rows else None

    def find_memory_id(self, memory_id: str) -> tuple[str, Memory] | None:
        rows = self._rows(self._sql(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} WHERE memory_id = ?"),
            (memory_id,))
        if not rows:
            return None
        mem = self._map.memory(rows[0])
        return mem.user_id, mem

    def find_by_hash(
        self, user_id: str, workspace: str | None, content_hash: str
    ) -> Memory | None:
        rows = self._rows(self._sql(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} WHERE user_id = ? "
            f"AND content_hash = ? AND workspace = ? AND {self._dialect.flag('is_active')} "
            "ORDER BY created_at, memory_id LIMIT 1"), (user_id, content_hash, workspace or ""))
        return self._map.memory(rows[0]) if rows else None

    def list_memories(
        self, user_id: str, flt: MemoryFilter, limit: int = 100, offset: int = 0,
        order: str = "created_at",
    ) -> list[Memory]:
        if order not in MEMORY_ORDERS:
            raise ValueError(f"cannot order memories by {order!r}")
        where, params = self._where(user_id, flt)
        mark = self._dialect.mark
        rows = self._rows(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} WHERE {where} "
            f"ORDER BY {order} DESC, memory_id LIMIT {mark} OFFSET {mark}",
            (*params, limit, offset))
        return [self._map.memory(r) for r in rows]

    def count_memories(self, user_id: str, flt: MemoryFilter) -> int:
        where, params = self._where(user_id, flt)
        return int(self._rows(f"SELECT count(*) FROM memories WHERE {where}", params)[0][0])

    def max_access_count(self, user_id: str) -> int:
        rows = self._rows(self._sql(
            f"SELECT max(access_count) FROM {self._memory_rows} WHERE user_id = ? "
            f"AND {self._dialect.flag('is_active')}"), (user_id,))
        return int(rows[0][0] or 0)

    def memory_users(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT user_id FROM memories ORDER BY user_id")]

    def link_entities(self, user_id: str, memory_id: str, entities: Sequence[str]) -> None:
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} memory_entities (user_id, entity, memory_id) "
                  f"VALUES (?, ?, ?){d.ignore_suffix}"),
            [(user_id, e, memory_id) for e in dict.fromkeys(entities)])
