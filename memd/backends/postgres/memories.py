"""PostgreSQL memories: rows in ``memories`` with their access stats in ``memory_stats``
(sql/postgres/004_memory_stats.sql), read together through the view ``memory_rows``.
Secure deletion is a VACUUM matter on PostgreSQL and is not done here."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from memd.backends.base import AccessHit, Vector
from memd.backends.common.candidates import access_totals
from memd.backends.common.columns import MEMORY_COLUMNS, MEMORY_UPDATABLE, marks
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.messages import PostgresMessages
from memd.backends.postgres.queries import MEMORY_TABLE_COLUMNS, STATS_COLUMNS, STATS_UPDATABLE
from memd.backends.postgres.schema import Conn
from memd.errors import NotFound
from memd.models.embedder import text_hash
from memd.types import Memory, MemoryFilter

_INSERT_MEMORY = (f"INSERT INTO memories ({MEMORY_TABLE_COLUMNS}, embedding) "
                  f"VALUES ({marks('%s', 23)})")
_INSERT_STATS = f"INSERT INTO memory_stats ({STATS_COLUMNS}) VALUES ({marks('%s', 5)})"


class PostgresMemories(PostgresMessages):
    """Memories and their stats: writes, deletes with what derives from them, sweeps."""

    def insert_memory(self, memory: Memory, vector: Vector | None) -> Memory:
        m = memory
        emb = self._vector(vector) if vector is not None else None
        with self._txn() as conn:
            conn.execute(
                _INSERT_MEMORY,
                (m.id, m.user_id, m.workspace or "", m.session_id, int(m.tier), int(m.scope),
                 m.text, m.content_hash, int(m.provenance), m.provenance_message_id,
                 m.confidence, m.importance, m.created_at, m.updated_at, m.expires_at,
                 m.is_active, m.is_validated, m.token_count, m.superseded_by,
                 list(m.tags), list(m.entities), Jsonb(m.metadata), emb),
            )
            conn.execute(
                _INSERT_STATS,
                (m.user_id, m.id, m.access_count, m.last_accessed_at,
                 m.relevance_accumulator),
            )
            if m.entities:
                self.link_entities(m.user_id, m.id, m.entities)
        return memory

    def update_memory(
        self, user_id: str, memory_id: str, vector: Vector | None = None, **changes: Any
    ) -> Memory:
        bad = set(changes) - set(MEMORY_UPDATABLE) - set(STATS_UPDATABLE)
        if bad:
            raise ValueError(f"not updatable on a memory: {sorted(bad)}")
        sets: list[sql.Composable] = []
        values: list[Any] = []
        stats = {k: v for k, v in changes.items() if k in STATS_UPDATABLE}
        for k, v in changes.items():
            if k in stats:
                continue
            sets.append(sql.SQL("{} = %s").format(sql.Identifier(MEMORY_UPDATABLE[k])))
            if k in ("tags", "entities"):
                v = list(v)
            elif k == "metadata":
                v = Jsonb(v)
            elif k in ("is_active", "is_validated"):
                v = bool(v)
            elif k in ("tier", "scope", "provenance"):
                v = int(v)
            values.append(v)
        if vector is not None:
            sets.append(sql.SQL("embedding = %s"))
            values.append(self._vector(vector))
        with self._txn() as conn:
            # A tier change to or from 0 moves the row between memories_working and
            # memories_durable; the read after the updates finds it where it landed.
            if sets:
                conn.execute(sql.SQL(
                    "UPDATE memories SET {} WHERE user_id = %s AND memory_id = %s"
                ).format(sql.SQL(", ").join(sets)), (*values, user_id, memory_id))
            if stats:
                conn.execute(sql.SQL(
                    "UPDATE memory_stats SET {} WHERE user_id = %s AND memory_id = %s"
                ).format(sql.SQL(", ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(STATS_UPDATABLE[k]))
                    for k in stats
                )), (*(int(v) for v in stats.values()), user_id, memory_id))
            row = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memory_rows WHERE user_id = %s AND memory_id = %s",
                (user_id, memory_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"no memory {memory_id!r} for user {user_id!r}")
            if "entities" in changes:
                conn.execute(
                    "DELETE FROM memory_entities WHERE user_id = %s AND memory_id = %s",
                    (user_id, memory_id),
                )
                self.link_entities(user_id, memory_id, changes["entities"])
        return MAP.memory(row)

    def _forget(self, conn: Conn, user_id: str, removed: Sequence[tuple[str, str]]) -> None:
        """Remove what was derived from deleted memories, given (memory_id, text)."""
        if not removed:
            return
        ids = [r[0] for r in removed]
        for table in ("memory_entities", "memory_stats"):
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE user_id = %s AND memory_id = ANY(%s)").format(
                    sql.Identifier(table)),
                (user_id, ids),
            )
        # keyed as the embedder keys it: the exact text (content_hash is lower case)
        conn.execute("DELETE FROM embedding_cache WHERE content_hash = ANY(%s)",
                     ([text_hash(r[1]) for r in removed],))
        conn.execute(
            "UPDATE memories SET superseded_by = NULL WHERE user_id = %s "
            "AND superseded_by = ANY(%s)",
            (user_id, ids),
        )

    def _delete_memories(self, user_id: str, where: str, params: Sequence[Any]) -> int:
        """Delete the user's memories matching ``where`` and everything derived from
        them (see :meth:`_forget`); returns how many."""
        with self._txn() as conn:
            removed = conn.execute(
                f"DELETE FROM memories WHERE user_id = %s AND {where} "
                "RETURNING memory_id, content_text",
                (user_id, *params),
            ).fetchall()
            self._forget(conn, user_id, removed)
        return len(removed)

    def delete_memory(self, user_id: str, memory_id: str) -> bool:
        return self._delete_memories(user_id, "memory_id = %s", (memory_id,)) > 0

    def memories_by_entities(
        self, user_id: str, entities: Sequence[str], k: int, flt: MemoryFilter
    ) -> list[Memory]:
        if not entities:
            return []
        where, params = self._where(user_id, flt)
        rows = self._rows(
            f"SELECT {MEMORY_COLUMNS} FROM memory_rows WHERE {where} AND memory_id IN "
            "(SELECT e.memory_id FROM memory_entities e WHERE e.user_id = %s "
            "AND e.entity = ANY(%s)) ORDER BY importance DESC, memory_id LIMIT %s",
            (*params, user_id, list(entities), k),
        )
        return [MAP.memory(r) for r in rows]

    def record_access(self, user_id: str, hits: Sequence[AccessHit], now: float) -> None:
        """One statement for all of ``hits``: a gathered access job names hundreds of
        memories, and one UPDATE per memory would be a round trip each."""
        totals = access_totals(hits)
        if not totals:
            return
        self._write(
            "UPDATE memory_stats AS s SET access_count = s.access_count + h.n, "
            "last_accessed_at = %s, relevance_accumulator = s.relevance_accumulator + h.rel "
            "FROM unnest(%s::text[], %s::int[], %s::float8[]) AS h (mid, n, rel) "
            "WHERE s.user_id = %s AND s.memory_id = h.mid",
            (now, list(totals), [n for n, _ in totals.values()],
             [rel for _, rel in totals.values()], user_id),
        )

    def iter_memories(self, user_id: str | None = None) -> Iterator[Memory]:
        # Keyset pages in primary-key order: each page is an index range scan.
        last = ("", "")
        while True:
            if user_id is None:
                rows = self._rows(
                    f"SELECT {MEMORY_COLUMNS} FROM memory_rows "
                    "WHERE (user_id, memory_id) > (%s, %s) ORDER BY user_id, memory_id LIMIT 500",
                    last,
                )
            else:
                rows = self._rows(
                    f"SELECT {MEMORY_COLUMNS} FROM memory_rows WHERE user_id = %s "
                    "AND memory_id > %s ORDER BY memory_id LIMIT 500", (user_id, last[1]),
                )
            if not rows:
                return
            for r in rows:
                yield MAP.memory(r)
            last = (rows[-1][1], rows[-1][0])

    def expire_memories(self, now: float) -> int:
        return self._write(
            "UPDATE memories SET is_active = false, updated_at = %s WHERE is_active "
            "AND expires_at IS NOT NULL AND expires_at <= %s",
            (now, now),
        )

    def delete_session_working_memory(self, user_id: str, session_id: str) -> int:
        return self._delete_memories(user_id, "session_id = %s AND memory_tier = 0",
                                     (session_id,))
