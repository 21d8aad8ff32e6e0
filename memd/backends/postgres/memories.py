"""PostgreSQL memories: rows in ``memories`` with their access stats in ``memory_stats``
(sql/postgres/004_memory_stats.sql), read together through the view ``memory_rows``.
Secure deletion is a VACUUM matter on PostgreSQL and is not done here.

Retrieval: KNN is ``ORDER BY embedding <=> q LIMIT k`` over HNSW indexes (cosine), with
pgvector's iterative index scan so that filters never starve the result, and every
candidate channel runs in one statement (:meth:`PostgresMemories.memory_candidates`).
Full text: ``websearch_to_tsquery`` over generated tsvectors, ranked by
``ts_rank`` normalized by the best hit, so relevance is in [0, 1] as on SQLite. Under
row-level security the GIN probe runs in a SECURITY DEFINER function as the owner, for
the acting user's rows only (the @@ match is not LEAKPROOF, so through the policies it
would scan row by row), and the rows are read back through the policies."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, cast

from psycopg import sql
from psycopg.types.json import Jsonb

from memd.auth import current_actor
from memd.backends.base import AccessHit, Vector
from memd.backends.common.candidates import access_totals
from memd.backends.common.columns import MEMORY_COLUMNS, MEMORY_UPDATABLE, marks
from memd.backends.common.memories import SharedMemories
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.partitions import PARENTS, PostgresPartitions, Tables
from memd.backends.postgres.queries import (
    MEMORY_TABLE_COLUMNS,
    PROBE_FILTER,
    STATS_COLUMNS,
    STATS_UPDATABLE,
    accessed,
    memory_where,
    probe_filter,
    ranked,
    search_text,
    with_stats,
)
from memd.backends.postgres.schema import Conn
from memd.backends.postgres.vectors import as_vector, vector_array
from memd.errors import NotFound
from memd.models.embedder import text_hash
from memd.types import Found, Memory, MemoryFilter, Scope

_INSERT_MEMORY = (f"INSERT INTO memories ({MEMORY_TABLE_COLUMNS}, embedding) "
                  f"VALUES ({marks('%s', 23)})")
_INSERT_STATS = f"INSERT INTO memory_stats ({STATS_COLUMNS}) VALUES ({marks('%s', 5)})"


class PostgresMemories(SharedMemories):
    """Memories and their stats: writes, deletes with what derives from them, sweeps,
    and retrieval's channels."""

    _memory_rows = "memory_rows"  # memories with their memory_stats row (004)
    _where = staticmethod(memory_where)

    def __init__(self, conn: PostgresPartitions) -> None:
        super().__init__(conn)
        self._pg = conn

    def insert_memory(self, memory: Memory, vector: Vector | None) -> Memory:
        m = memory
        emb = as_vector(self._pg.dim, vector) if vector is not None else None
        with self._pg.txn() as conn:
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
            values.append(as_vector(self._pg.dim, vector))
        with self._pg.txn() as conn:
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
        with self._pg.txn() as conn:
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

    def nearest_memories(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        q = as_vector(self._pg.dim, vector)
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
        return {mid: cast(Vector, vector_array(v)) for mid, v in rows}

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        """All channels in one statement (a UNION ALL of one branch per channel, each
        row tagged with its channel), every row with its cosine computed in the server:
        one round trip, and no vector leaves the database. Over a user's own partitions
        outside a transaction, the keyword channel is a second statement, run at the
        same time on another connection (self._pg.side_workers). The limits are written
        into the statement: a generic plan (Tables.own) costs ``LIMIT $n`` as a tenth of the
        rows, where reading an index in order to the limit is the plan wanted."""
        q = as_vector(self._pg.dim, vector)
        where, params = self._where(user_id, flt)
        t = self._pg.tables(user_id, under_rls=True)
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
        generic = t.own and self._pg.sole_owner(user_id, t)
        side: Future[list[tuple[Any, ...]]] | None = None
        if text is not None and keyword_k > 0:
            kw_sql, kw_params = self._keyword_select(user_id, text, keyword_k, flt,
                                                     tagged("k"), [q], t)
            if t.own and not self._pg.in_transaction():
                # On a side worker and a connection of its own, while this thread runs
                # the other channels (as the same acting user under row-level security:
                # the worker runs in a copy of this context). Not in a transaction: the
                # other connection would not see its writes.
                side = self._pg.side_workers.submit(
                    contextvars.copy_context().run, self._pg.side_rows, t, channel_rows(kw_sql),
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
            rows = self._pg.rows_in(t, channel_rows(" UNION ALL ".join(branches)),
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

    def keyword_memories(
        self, user_id: str, query: str, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        text = search_text(query)
        if text is None:
            return []
        query_sql, params = self._keyword_select(user_id, text, k, flt)
        rows = self._rows(with_stats(query_sql, ", r.rank_", "ORDER BY r.rank_ DESC, r.memory_id"),
                       (*params, user_id))
        return ranked(rows, MAP.memory)

    def _keyword_select(
        self, user_id: str, text: str, k: int, flt: MemoryFilter, extra: str = "",
        extra_params: Sequence[Any] = (), tables: Tables = PARENTS,
    ) -> tuple[str, list[Any]]:
        """The keyword channel's SELECT over memories (``tables``' memories):
        MEMORY_TABLE_COLUMNS, ``extra`` columns, the rank (``rank_``); best first."""
        where, params = self._where(user_id, flt)
        if current_actor() is not None:
            # Under RLS: ids from a GIN probe run as the owner, rows through the policies.
            # Over the user's own leaves the probe names them and applies the whole
            # filter (011): its top k are the answer. Over the parents it plans its query
            # across every partition at each call and applies only part of the filter
            # (005), so its ids are over-fetched and the rest applies after it.
            if tables.own:
                probe, filter_args = "memd_keyword_own_memory_top(%s, %s, %s, ", PROBE_FILTER
                probe_params = [user_id, *tables.memory_leaves]
                lim, tail = k, probe_filter(flt)
            else:
                probe, filter_args = "memd_keyword_memory_ids(%s, ", ""
                probe_params = [user_id]
                lim, tail = 4 * k + 20, []
            return (
                f"SELECT {MEMORY_TABLE_COLUMNS}{extra}, k.rank::float8 AS rank_ FROM {probe}"
                f"websearch_to_tsquery('english', %s), %s, %s, %s::text[]{filter_args}) "
                f"AS k (kid, ktier, rank) JOIN {tables.memories} AS memories "
                "ON memory_id = k.kid AND memory_tier = k.ktier "
                f"WHERE {where} ORDER BY k.rank DESC, memory_id LIMIT %s",
                [*extra_params, *probe_params, text, lim, not flt.include_inactive,
                 None if flt.workspaces is None else list(flt.workspaces), *tail,
                 *params, k],
            )
        # A generic plan (own partitions) would parse the query again for every row it
        # ranks or rechecks; a sub-select is computed once. A custom plan folds the call.
        tsq = "websearch_to_tsquery('english', %s)"
        if tables.own:
            tsq = f"(SELECT {tsq})"
        return (
            f"SELECT {MEMORY_TABLE_COLUMNS}{extra}, ts_rank(content_tsv, {tsq})::float8 AS rank_ "
            f"FROM {tables.memories} AS memories WHERE {where} AND content_tsv @@ {tsq} "
            f"ORDER BY rank_ DESC, memory_id LIMIT {int(k)}",
            [*extra_params, text, *params, text],
        )

