"""PostgreSQL full text: ``websearch_to_tsquery`` over generated tsvectors, ranked by
``ts_rank`` normalized by the best hit, so relevance is in [0, 1] as on SQLite. Under
row-level security the GIN probe runs in a SECURITY DEFINER function as the owner, for
the acting user's rows only (the @@ match is not LEAKPROOF, so through the policies it
would scan row by row), and the rows are read back through the policies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memd.auth import current_actor
from memd.backends.common.columns import MESSAGE_COLUMNS
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.partitions import PARENTS, PostgresPartitions, Tables
from memd.backends.postgres.queries import (
    MEMORY_TABLE_COLUMNS,
    PROBE_FILTER,
    probe_filter,
    ranked,
    search_text,
    with_stats,
)
from memd.types import Memory, MemoryFilter, Message


class PostgresFullText(PostgresPartitions):
    """The keyword channels of messages and memories."""

    def keyword_messages(
        self, user_id: str, query: str, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        text = search_text(query)
        if text is None:
            return []
        if current_actor() is not None:
            return self._keyword_messages_rls(user_id, text, k, session_id)
        # a pruned message keeps its keyword vector (a trigger derives it from the text,
        # which stays for its owner): the search skips it
        where = ("user_id = %s AND content_tsv @@ websearch_to_tsquery('english', %s) "
                 "AND NOT is_pruned")
        params: list[Any] = [text, user_id, text]
        if session_id is not None:
            where += " AND session_id = %s"
            params.append(session_id)
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS}, "
            "ts_rank(content_tsv, websearch_to_tsquery('english', %s)) AS r "
            f"FROM messages WHERE {where} ORDER BY r DESC, message_id LIMIT %s",
            (*params, k),
        )
        return ranked(rows, MAP.message)

    def _keyword_messages_rls(
        self, user_id: str, text: str, k: int, session_id: str | None
    ) -> list[tuple[Message, float]]:
        """keyword_messages under RLS: the GIN probe runs in memd_keyword_message_ids
        (see sql/postgres/003_auth.sql), the rows are read through the policies."""
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS}, k.rank FROM memd_keyword_message_ids("
            "%s, websearch_to_tsquery('english', %s), %s, %s) AS k (kid, kat, rank) "
            "JOIN messages ON user_id = %s AND message_id = k.kid AND created_at = k.kat "
            "AND NOT is_pruned "
            "ORDER BY k.rank DESC, message_id",
            (user_id, text, k, session_id, user_id),
        )
        return ranked(rows, MAP.message)

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
