"""PostgreSQL messages: appends under the session's row lock, and history windows over a
user's own partition where it may."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.types.json import Jsonb

from memd.backends.common.columns import MESSAGE_COLUMNS
from memd.backends.common.dialect import POSTGRES
from memd.backends.common.queries import BUMP_HISTORY_VERSION, recent_query
from memd.backends.common.store import INSERT_MESSAGE, message_params, new_messages
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.vectors import PostgresVectors
from memd.errors import NotFound
from memd.types import Message, NewMessage


class PostgresMessages(PostgresVectors):
    """Messages: appends under the session's row lock, and history windows."""

    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None, expires_at: float | None = None,
    ) -> list[Message]:
        # No savepoint: nothing here raises an error a caller goes on from (the row lock
        # keeps the turns unique; NotFound comes before any write).
        with self._txn(savepoint=False) as conn:
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
        tables = self._tables(user_id)
        query, params = recent_query(
            MESSAGE_COLUMNS, user_id, session_id, before_turn, mark="%s",
            active="NOT is_compressed AND NOT is_pruned", nonneg="greatest",
            table=tables.messages,
        )
        rows = self._rows_in(tables, query, (*params, limit, token_budget))
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
        with self._txn() as conn:
            conn.execute(
                "UPDATE messages SET is_compressed = true, compressed_summary_id = %s "
                "WHERE user_id = %s AND session_id = %s AND message_id = ANY(%s)",
                (summary_id, user_id, session_id, list(message_ids)),
            )
            conn.execute(self._sql(BUMP_HISTORY_VERSION), (user_id, session_id))
