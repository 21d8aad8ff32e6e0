"""PostgreSQL vectors: KNN is ``ORDER BY embedding <=> q LIMIT k`` over HNSW indexes
(cosine), with pgvector's iterative index scan so that filters never starve the result;
and retrieval's candidate channels in one statement (:meth:`memory_candidates`)."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from memd.auth import current_actor
from memd.backends.base import Vector
from memd.backends.common.columns import MESSAGE_COLUMNS
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.fulltext import PostgresFullText
from memd.backends.postgres.queries import (
    MEMORY_TABLE_COLUMNS,
    accessed,
    search_text,
    with_stats,
)
from memd.errors import StorageError
from memd.types import Found, Memory, MemoryFilter, Message, Scope


def _array(value: Any) -> NDArray[np.float32]:
    """A loaded vector as float32 numpy (pgvector >= 0.4 loads ``Vector`` objects)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


class PostgresVectors(PostgresFullText):
    """The vector channels, and every memory candidate channel in one statement."""

    def _vector(self, vector: Vector) -> NDArray[np.float32]:
        arr = np.asarray(vector, dtype=np.float32)
        if arr.shape != (self.dim,):
            raise StorageError(f"vector has {arr.size} dims, store expects {self.dim}")
        return arr

    def set_message_embeddings(self, user_id: str, items: Sequence[tuple[str, Vector]]) -> None:
        self._write_many(
            "UPDATE messages SET embedding = %s WHERE user_id = %s AND message_id = %s "
            "AND NOT is_pruned",
            [(self._vector(v), user_id, mid) for mid, v in items],
        )

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        q = self._vector(vector)
        where = "user_id = %s AND embedding IS NOT NULL"
        params: list[Any] = [q, user_id]
        if session_id is not None:
            where += " AND session_id = %s"
            params.append(session_id)
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS}, 1 - (embedding <=> %s) FROM messages WHERE {where} "
            "ORDER BY embedding <=> %s LIMIT %s",
            (*params, q, k),
        )
        return [(MAP.message(r), float(r[-1])) for r in rows]

    def nearest_memories(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        q = self._vector(vector)
        where, params = self._where(user_id, flt)
        rows = self._rows(with_stats(
            f"SELECT {MEMORY_TABLE_COLUMNS}, 1 - (embedding <=> %s) AS sim FROM memories "
            f"WHERE {where} AND embedding IS NOT NULL ORDER BY embedding <=> %s LIMIT %s",
            ", r.sim"), (q, *params, q, k, user_id),
        )
        pairs = [(MAP.memory(r), float(r[-1])) for r in rows]
        return sorted(pairs, key=lambda p: (-p[1], p[0].id))

    def get_memory_vectors(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, Vector]:
        if not memory_ids:
            return {}
        rows = self._rows(
            "SELECT memory_id, embedding FROM memories WHERE user_id = %s "
            "AND memory_id = ANY(%s) AND embedding IS NOT NULL",
            (user_id, list(memory_ids)),
        )
        return {mid: cast(Vector, _array(v)) for mid, v in rows}

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        """All channels in one statement (a UNION ALL of one branch per channel, each
        row tagged with its channel), every row with its cosine computed in the server:
        one round trip, and no vector leaves the database. Over a user's own partitions
        outside row-level security, the keyword channel is a second statement, run at
        the same time on another connection (self._side_workers). The limits are written
        into the statement: a generic plan (Tables.own) costs ``LIMIT $n`` as a tenth of the
        rows, where reading an index in order to the limit is the plan wanted."""
        q = self._vector(vector)
        where, params = self._where(user_id, flt)
        t = self._tables(user_id, under_rls=True)
        memories = f"{t.memories} AS memories"

        def tagged(via: str) -> str:
            return f", 1 - (embedding <=> %s) AS sim, '{via}' AS via"

        def channel_rows(inner: str) -> str:  # the rows of every channel's statement
            return with_stats(inner, ", r.sim, r.via, r.rank_", stats=t.memory_stats)

        branches = [
            f"(SELECT {MEMORY_TABLE_COLUMNS}{tagged('v')}, 0::float8 AS rank_ FROM {memories} "
            f"WHERE {where} AND embedding IS NOT NULL ORDER BY embedding <=> %s "
            f"LIMIT {int(knn_k)})"
        ]
        args: list[Any] = [q, *params, q]
        text = search_text(query)
        generic = t.own and self._sole_owner(user_id, t)
        side: Future[list[tuple[Any, ...]]] | None = None
        if text is not None and keyword_k > 0:
            kw_sql, kw_params = self._keyword_select(user_id, text, keyword_k, flt,
                                                     tagged("k"), [q], t)
            if t.own and current_actor() is None:
                # On a side worker and a connection of its own, while this thread runs
                # the other channels. Not under row-level security: there the second
                # statement's settings cost what the overlap saves.
                side = self._side_workers.submit(
                    contextvars.copy_context().run, self._side_rows, t, channel_rows(kw_sql),
                    (*kw_params, user_id), generic)
            else:
                branches.append(f"({kw_sql})")
                args += kw_params
        if entities and entity_k > 0:
            branches.append(
                f"(SELECT {MEMORY_TABLE_COLUMNS}{tagged('e')}, 0::float8 FROM {memories} "
                f"WHERE {where} "
                f"AND memory_id IN (SELECT e.memory_id FROM {t.memory_entities} e "
                "WHERE e.user_id = %s AND e.entity = ANY(%s)) "
                f"ORDER BY importance DESC, memory_id LIMIT {int(entity_k)})"
            )
            args += [q, *params, user_id, list(entities)]
        if frequent_k > 0:
            g_where, g_params = self._where(user_id, replace(flt, scope=Scope.GLOBAL))
            branches.append(
                f"(SELECT {MEMORY_TABLE_COLUMNS}{tagged('f')}, 0::float8 FROM {accessed(t)} "
                f"WHERE {g_where} ORDER BY hits DESC, memory_id LIMIT {int(frequent_k)})"
            )
            args += [q, *g_params]
        try:
            rows = self._rows_in(t, channel_rows(" UNION ALL ".join(branches)),
                                 (*args, user_id), generic=generic)
        except BaseException:
            if side is not None:
                side.cancel()
            raise
        if side is not None:
            rows += side.result()
        top = max((float(r[-1]) for r in rows if r[-2] == "k"), default=0.0) or 1.0
        mems: dict[str, Memory] = {}
        sims: dict[str, float] = {}
        keyword: dict[str, float] = {}
        by_entity: set[str] = set()
        for r in rows:
            mid = r[0]
            if mid not in mems:
                mems[mid] = MAP.memory(r)
                sims[mid] = float(r[-3]) if r[-3] is not None else 0.0
            if r[-2] == "k":
                keyword[mid] = float(r[-1]) / top
            elif r[-2] == "e":
                by_entity.add(mid)
        return {mid: Found(mem, sims[mid], keyword.get(mid, 0.0), mid in by_entity)
                for mid, mem in mems.items()}
