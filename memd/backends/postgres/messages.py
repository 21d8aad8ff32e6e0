"""PostgreSQL messages: appends under the session's row lock, history windows over a
user's own partition where it may, the vector channel (HNSW, cosine) and the keyword
channel (see memd.backends.postgres.memories for full text under row-level security),
and the retention sweep's deletes (a message's vector and full-text vector live in its
own row)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from memd.auth import current_actor
from memd.backends.base import Vector
from memd.backends.common.columns import MESSAGE_COLUMNS
from memd.backends.common.dialect import POSTGRES
from memd.backends.common.messages import (
    INSERT_MESSAGE,
    SharedMessages,
    message_params,
    new_messages,
)
from memd.backends.common.queries import BUMP_HISTORY_VERSION, recent_query
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.partitions import PostgresPartitions
from memd.backends.postgres.queries import ranked, search_text
from memd.backends.postgres.vectors import as_vector
from memd.errors import NotFound
from memd.types import Message, NewMessage


class PostgresMessages(SharedMessages):
    """Messages: appends under the session's row lock, history windows, the search
    channels and the retention sweep's deletes."""

    _needs_embedding = ("embedding IS NULL AND content IS NOT NULL AND NOT is_pruned "
                        "ORDER BY created_at, session_id, turn_index")

    def __init__(self, conn: PostgresPartitions) -> None:
        super().__init__(conn)
        self._pg = conn

    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None, expires_at: float | None = None,
    ) -> list[Message]:
        # No savepoint: nothing here raises an error a caller goes on from (the row lock
        # keeps the turns unique; NotFound comes before any write).
        with self._pg.txn(savepoint=False) as conn:
            # The session's row lock: concurrent appends to one session take turns, so
            # turns stay unique. Taken by the update itself, which returns the new count.
            row = conn.execute(
                "UPDATE sessions SET turn_count = turn_count + %s, updated_at = %s, "
                "expires_at = coalesce(%s, expires_at) "
                "WHERE user_id = %s AND session_id = %s RETURNING turn_count",
                (len(messages), now, expires_at, user_id, session_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"no session {session_id!r} for user {user_id!r}")
            out = new_messages(user_id, session_id, messages, token_counts, content_hashes,
                               chain_hashes, int(row[0]) - len(messages), now)
            with conn.cursor() as cur:
                cur.executemany(POSTGRES.sql(INSERT_MESSAGE),
                                [message_params(m, Jsonb) for m in out])
        return out

    def recent_messages(
        self, user_id: str, session_id: str, token_budget: int, *,
        before_turn: int | None = None, limit: int = 512,
    ) -> list[Message]:
        tables = self._pg.tables(user_id)
        query, params = recent_query(
            MESSAGE_COLUMNS, user_id, session_id, before_turn, mark="%s",
            active="NOT is_compressed AND NOT is_pruned", nonneg="greatest",
            table=tables.messages,
        )
        rows = self._pg.rows_in(tables, query, (*params, limit, token_budget))
        return [MAP.message(r) for r in rows]

    def find_chain(self, user_id: str, chain_hashes: Sequence[str]) -> list[Message]:
        if not chain_hashes:
            return []
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = %s "
            "AND chain_hash = ANY(%s) ORDER BY session_id, turn_index",
            (user_id, list(dict.fromkeys(chain_hashes))),
        )
        return [MAP.message(r) for r in rows]

    def mark_compressed(
        self, user_id: str, session_id: str, message_ids: Sequence[str], summary_id: str
    ) -> None:
        with self._pg.txn() as conn:
            conn.execute(
                "UPDATE messages SET is_compressed = true, compressed_summary_id = %s "
                "WHERE user_id = %s AND session_id = %s AND message_id = ANY(%s)",
                (summary_id, user_id, session_id, list(message_ids)),
            )
            conn.execute(self._sql(BUMP_HISTORY_VERSION), (user_id, session_id))

    def set_message_embeddings(self, user_id: str, items: Sequence[tuple[str, Vector]]) -> None:
        self._write_many(
            "UPDATE messages SET embedding = %s WHERE user_id = %s AND message_id = %s "
            "AND NOT is_pruned",
            [(as_vector(self._pg.dim, v), user_id, mid) for mid, v in items],
        )

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        q = as_vector(self._pg.dim, vector)
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

    def messages_at(self, user_id: str, turns: Sequence[tuple[str, int]]) -> list[Message]:
        places = list(dict.fromkeys(turns))
        if not places:
            return []
        # A key look-up per place, the places an array join (an OR of them, or a UNION
        # of a look-up each, costs more to plan over the partitions than to run)
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages JOIN unnest(%s::text[], %s::integer[]) "
            "AS p (sid, turn) ON session_id = p.sid AND turn_index = p.turn "
            "WHERE user_id = %s",
            ([sid for sid, _ in places], [turn for _, turn in places], user_id))
        return [MAP.message(r) for r in rows]

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

    def delete_inactive_messages(self, user_id: str, before: float) -> tuple[int, int]:
        with self.transaction():
            sessions = self._inactive_sessions(user_id, before)
            if not sessions:
                return 0, 0
            deleted = self._write("DELETE FROM messages WHERE user_id = %s "
                                  "AND session_id = ANY(%s)", (user_id, sessions))
            self._write_many(self._sql(BUMP_HISTORY_VERSION),
                             [(user_id, s) for s in sessions])
        return deleted, len(sessions)

