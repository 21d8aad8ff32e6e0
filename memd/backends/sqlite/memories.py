"""SQLite memories: writes that keep FTS5, vec0 and the vector cache in step, the memory
filter, and retrieval's channels (the keyword ranking on the side connection)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from memd.backends.base import AccessHit, Vector
from memd.backends.common.candidates import access_totals, compose_candidates
from memd.backends.common.columns import MEMORY_COLUMNS, MEMORY_UPDATABLE, marks
from memd.backends.common.memories import SharedMemories
from memd.backends.sqlite.connection import MAP, SQLiteConnection, to_json
from memd.backends.sqlite.fulltext import (
    KEYWORD_RANKS,
    Ranks,
    SideRanker,
    fts_query,
    keyword_ranks_limit,
    memory_index_row,
)
from memd.backends.sqlite.vectors import SQLiteVectors
from memd.errors import NotFound
from memd.models.embedder import text_hash
from memd.types import Found, Memory, MemoryFilter, Scope

_INSERT_MEMORY = f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES ({marks('?', 25)})"


_BY_ACCESS_KEPT = 64  # list_memories answers by access count kept (filters, users)


class SQLiteMemories(SharedMemories):
    """Memories: writes kept in step across FTS5, vec0 and the cache; the channels, the
    keyword one ranked on a side connection (``side``) while the caller runs the vector
    one."""

    def __init__(self, conn: SQLiteConnection, vectors: SQLiteVectors,
                 side: SideRanker) -> None:
        super().__init__(conn)
        self._conn = conn
        self._vectors = vectors
        self.side = side
        conn.on_close.append(side.close)
        # list_memories' answers by access count (each compile's frequent channel reads
        # the same ones), kept while no write and no other connection changed the file
        self._by_access: OrderedDict[tuple[Any, ...], tuple[tuple[int, int], list[Memory]]] \
            = OrderedDict()

    def list_memories(
        self, user_id: str, flt: MemoryFilter, limit: int = 100, offset: int = 0,
        order: str = "created_at",
    ) -> list[Memory]:
        """As SharedMemories', an answer by access count from memory when nothing was
        written since it was read (on the store's connection, outside a transaction)
        and none of its memories has expired since: the memories that pass the filter
        only lose those that expire, so the answer's first ``limit`` are still the
        first."""
        if order != "access_count":
            return super().list_memories(user_id, flt, limit, offset, order)
        with self._conn.lock:  # no other thread is in a transaction meanwhile
            version = self._conn.changes()
            if version is None:
                return super().list_memories(user_id, flt, limit, offset, order)
            # a global scope's answer is every session's (_where: scope 1 or the session)
            shown = replace(flt, now=None, session_id=None if flt.scope is Scope.GLOBAL
                            else flt.session_id)
            key = (user_id, shown, flt.now is None, limit, offset)
            held = self._by_access.get(key)
            if held is not None and held[0] == version and (flt.now is None or all(
                    m.expires_at is None or m.expires_at > flt.now for m in held[1])):
                self._by_access.move_to_end(key)
                return list(held[1])
            out = super().list_memories(user_id, flt, limit, offset, order)
            self._by_access[key] = (version, out)
            while len(self._by_access) > _BY_ACCESS_KEPT:
                self._by_access.popitem(last=False)
            return list(out)

    def insert_memory(self, memory: Memory, vector: Vector | None) -> Memory:
        m = memory
        with self.transaction():
            self._write(
                _INSERT_MEMORY,
                (m.id, m.user_id, m.workspace or "", m.session_id, int(m.tier), int(m.scope),
                 m.text, m.content_hash, int(m.provenance), m.provenance_message_id,
                 m.confidence, m.importance, m.relevance_accumulator, m.access_count,
                 m.last_accessed_at, m.created_at, m.updated_at, m.expires_at,
                 int(m.is_active), int(m.is_validated), m.token_count, m.superseded_by,
                 to_json(list(m.tags)), to_json(list(m.entities)), to_json(m.metadata)),
            )
            self._write(*memory_index_row(m.user_id, m.id, m.text))
            if vector is not None:
                self._vectors.put_memory_vector(m.id, m.user_id, m.workspace, m.is_active, vector)
            if m.entities:
                self.link_entities(m.user_id, m.id, m.entities)
        return memory

    def delete_memory(self, user_id: str, memory_id: str) -> bool:
        with self.transaction():
            rows = self._rows(
                "SELECT rowid, content_text FROM memories WHERE user_id = ? AND memory_id = ?",
                (user_id, memory_id),
            )
            if not rows:
                return False
            rowid, text = rows[0]
            self._write("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))
            self._write("DELETE FROM memory_vec WHERE memory_id = ?", (memory_id,))
            if user_id in self._vectors.memory_vectors:
                self._vectors.memory_vectors[user_id].remove(memory_id)
            self._write("DELETE FROM memory_entities WHERE memory_id = ?", (memory_id,))
            # keyed as the embedder keys it: the exact text (content_hash is lower case)
            self._write("DELETE FROM embedding_cache WHERE content_hash = ?",
                        (text_hash(text),))
            self._write("UPDATE memories SET superseded_by = NULL WHERE superseded_by = ?",
                        (memory_id,))
            self._write("DELETE FROM memories WHERE rowid = ?", (rowid,))
        return True

    def update_memory(
        self, user_id: str, memory_id: str, vector: Vector | None = None, **changes: Any
    ) -> Memory:
        bad = set(changes) - set(MEMORY_UPDATABLE)
        if bad:
            raise ValueError(f"not updatable on a memory: {sorted(bad)}")
        with self.transaction():
            current = self.get_memory(user_id, memory_id)
            if current is None:
                raise NotFound(f"no memory {memory_id!r} for user {user_id!r}")
            if changes:
                cols, values = [], []
                for k, v in changes.items():
                    cols.append(f"{MEMORY_UPDATABLE[k]} = ?")
                    if k in ("tags", "entities"):
                        v = to_json(list(v))
                    elif k == "metadata":
                        v = to_json(v)
                    elif k in ("is_active", "is_validated", "tier", "scope", "provenance"):
                        v = int(v)
                    values.append(v)
                self._write(
                    f"UPDATE memories SET {', '.join(cols)} WHERE user_id = ? AND memory_id = ?",
                    (*values, user_id, memory_id),
                )
            if "text" in changes:
                rowid = self._rows("SELECT rowid FROM memories WHERE memory_id = ?", (memory_id,))
                self._write("DELETE FROM memories_fts WHERE rowid = ?", (rowid[0][0],))
                self._write(*memory_index_row(user_id, memory_id, changes["text"],
                                              rowid[0][0]))
            if vector is not None:
                active = bool(changes.get("is_active", current.is_active))
                self._vectors.put_memory_vector(memory_id, user_id, current.workspace, active,
                                                vector)
            elif "is_active" in changes:
                self._write(
                    "UPDATE memory_vec SET active = ? WHERE memory_id = ?",
                    (int(changes["is_active"]), memory_id),
                )
                cached = self._vectors.memory_vectors.get(user_id)
                if cached is not None:
                    cached.set_active(memory_id, bool(changes["is_active"]))
            if "entities" in changes:
                self._write("DELETE FROM memory_entities WHERE memory_id = ?", (memory_id,))
                self.link_entities(user_id, memory_id, changes["entities"])
            updated = self.get_memory(user_id, memory_id)
        assert updated is not None
        return updated

    def _where(
        self, user_id: str, flt: MemoryFilter, alias: str = "", by_key: bool = False
    ) -> tuple[str, list[Any]]:
        """SQL for ``flt``. ``by_key``: the caller also filters on memory ids, so the
        user_id test is written ``+user_id`` to keep SQLite on the primary key."""
        p = f"{alias}." if alias else ""
        clauses = [f"+{p}user_id = ?" if by_key else f"{p}user_id = ?"]
        params: list[Any] = [user_id]
        if not flt.include_inactive:
            clauses.append(f"{p}is_active = 1")
        if not flt.include_superseded:
            clauses.append(f"{p}superseded_by IS NULL")
        if not flt.include_expired and flt.now is not None:
            clauses.append(f"({p}expires_at IS NULL OR {p}expires_at > ?)")
            params.append(flt.now)
        if flt.workspaces is not None:
            clauses.append(f"{p}workspace IN ({marks('?', len(flt.workspaces))})")
            params.extend(flt.workspaces)
        if flt.tiers is not None:
            clauses.append(f"{p}memory_tier IN ({marks('?', len(flt.tiers))})")
            params.extend(int(t) for t in flt.tiers)
        if flt.scope is not None:
            clauses.append(f"{p}memory_scope = ?")
            params.append(int(flt.scope))
        if flt.session_id is not None:
            clauses.append(f"({p}memory_scope = 1 OR {p}session_id = ?)")
            params.append(flt.session_id)
        for tag in flt.tags:
            clauses.append(f"EXISTS (SELECT 1 FROM json_each({p}tags) WHERE value = ?)")
            params.append(tag)
        return " AND ".join(clauses), params

    def _memories_by_ids(
        self, user_id: str, ids: Sequence[str], flt: MemoryFilter
    ) -> dict[str, Memory]:
        if not ids:
            return {}
        where, params = self._where(user_id, flt, by_key=True)
        rows = self._rows(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} AND memory_id IN "
            f"({marks('?', len(ids))})",
            (*params, *ids),
        )
        return {r[0]: MAP.memory(r) for r in rows}

    def nearest_memories(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        # The cache already applies activity and workspace; the few memories the other
        # filters (expiry, supersession, tiers, tags) drop are covered by the margin.
        pairs = self._vectors.cached_vectors(user_id).knn(
            vector, k + 10, not flt.include_inactive, flt.workspaces
        )
        by_id = self._memories_by_ids(user_id, [p[0] for p in pairs], flt)
        return [(by_id[mid], s) for mid, s in pairs if mid in by_id][:k]

    def keyword_memories(
        self, user_id: str, query: str, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        match = fts_query(user_id, query)
        if match is None:
            return []
        ranks = self._rows(KEYWORD_RANKS, (match, keyword_ranks_limit(k)))
        return self._keyword_rows(user_id, ranks, k, flt)

    def _keyword_rows(
        self, user_id: str, pairs: Sequence[tuple[str, float]], k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        """The keyword channel's memories from its ranking (KEYWORD_RANKS' rows)."""
        # The margin is for the filter (workspace, activity, expiry), which usually drops
        # none: fetch the first k + 5 rows, and the rest only if too few of those pass.
        head = k + 5
        by_id = self._memories_by_ids(user_id, [p[0] for p in pairs[:head]], flt)
        if len(by_id) < k and len(pairs) > head:
            by_id.update(self._memories_by_ids(user_id, [p[0] for p in pairs[head:]], flt))
        kept = [(by_id[mid], float(r)) for mid, r in pairs if mid in by_id][:k]
        top = max((r for _, r in kept), default=0.0) or 1.0
        return [(mem, r / top) for mem, r in kept]

    def memories_by_entities(
        self, user_id: str, entities: Sequence[str], k: int, flt: MemoryFilter
    ) -> list[Memory]:
        if not entities:
            return []
        ids = [r[0] for r in self._rows(
            "SELECT DISTINCT memory_id FROM memory_entities WHERE user_id = ? AND entity IN "
            f"({marks('?', len(entities))}) LIMIT 500",
            (user_id, *entities),
        )]
        found = sorted(self._memories_by_ids(user_id, ids, flt).values(),
                       key=lambda m: (-m.importance, m.id))
        return found[:k]

    def _start_side_ranking(self, user_id: str, query: str, k: int) -> Future[Ranks] | None:
        """The keyword channel's FTS5 ranking, started on the side connection while the
        caller runs the vector channel. None where it would not be right or would wait:
        an in-memory store (no second connection sees it), a transaction of this thread
        (its writes are not committed), or the side connection busy with another
        thread's ranking."""
        conn = self._conn
        if k <= 0 or conn.path == ":memory:" or conn.in_transaction() or conn.closed:
            return None
        match = fts_query(user_id, query)
        return None if match is None else self.side.start(match, keyword_ranks_limit(k))

    def record_access(self, user_id: str, hits: Sequence[AccessHit], now: float) -> None:
        self._write_many(
            "UPDATE memories SET access_count = access_count + ?, last_accessed_at = ?, "
            "relevance_accumulator = relevance_accumulator + ? "
            "WHERE user_id = ? AND memory_id = ?",
            [(n, now, rel, user_id, mid) for mid, (n, rel) in access_totals(hits).items()],
        )

    def iter_memories(self, user_id: str | None = None) -> Iterator[Memory]:
        last = ""
        while True:
            if user_id is None:
                rows = self._rows(
                    f"SELECT {MEMORY_COLUMNS} FROM memories WHERE memory_id > ? "
                    "ORDER BY memory_id LIMIT 500", (last,),
                )
            else:
                rows = self._rows(
                    f"SELECT {MEMORY_COLUMNS} FROM memories WHERE user_id = ? AND memory_id > ? "
                    "ORDER BY memory_id LIMIT 500", (user_id, last),
                )
            if not rows:
                return
            for r in rows:
                yield MAP.memory(r)
            last = rows[-1][0]

    def expire_memories(self, now: float) -> int:
        with self.transaction():
            ids = [r[0] for r in self._rows(
                "SELECT memory_id FROM memories WHERE is_active = 1 AND expires_at IS NOT NULL "
                "AND expires_at <= ?", (now,),
            )]
            self._write_many(
                "UPDATE memories SET is_active = 0, updated_at = ? WHERE memory_id = ?",
                [(now, i) for i in ids],
            )
            self._write_many("UPDATE memory_vec SET active = 0 WHERE memory_id = ?",
                             [(i,) for i in ids])
            self._vectors.drop_caches()
        return len(ids)

    def delete_session_working_memory(self, user_id: str, session_id: str) -> int:
        ids = [r[0] for r in self._rows(
            "SELECT memory_id FROM memories WHERE user_id = ? AND session_id = ? "
            "AND memory_tier = 0", (user_id, session_id),
        )]
        with self.transaction():
            for mid in ids:
                self.delete_memory(user_id, mid)
        return len(ids)

    def get_memory_vectors(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, Vector]:
        return self._vectors.cached_vectors(user_id).vectors_of(memory_ids)

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        ranks = self._start_side_ranking(user_id, query, keyword_k)
        return compose_candidates(
            self, user_id, query, vector, flt, knn_k=knn_k, keyword_k=keyword_k,
            entities=entities, entity_k=entity_k, frequent_k=frequent_k,
            keyword_hits=None if ranks is None
            else lambda: self._keyword_rows(user_id, ranks.result(), keyword_k, flt),
        )
