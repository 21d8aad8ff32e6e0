"""The reads of messages both dialects write alike, and how an append numbers its messages;
each backend's messages part adds appends, history windows and the search channels."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from memd.backends.common.columns import MESSAGE_COLUMNS, marks
from memd.backends.common.connection import Part
from memd.types import Message, NewMessage

INSERT_MESSAGE = f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ({marks('?', 23)})"


def new_messages(
    user_id: str, session_id: str, messages: Sequence[NewMessage], token_counts: Sequence[int],
    content_hashes: Sequence[str | None], chain_hashes: Sequence[str | None] | None,
    after_turn: int, now: float,
) -> list[Message]:
    """The Messages ``append_messages`` stores, numbered from ``after_turn + 1``."""
    chains = list(chain_hashes) if chain_hashes is not None else [None] * len(messages)
    return [
        Message(
            id=uuid.uuid4().hex, session_id=session_id, user_id=user_id,
            turn_index=after_turn + i, role=msg.role, content=msg.content, token_count=tokens,
            created_at=now, name=msg.name, tool_calls=msg.tool_calls,
            tool_call_id=msg.tool_call_id, content_hash=chash, model=msg.model,
            finish_reason=msg.finish_reason, prompt_tokens=msg.prompt_tokens,
            completion_tokens=msg.completion_tokens, latency_ms=msg.latency_ms,
            metadata=dict(msg.metadata), chain_hash=chain, sanitized=msg.sanitized,
        )
        for i, (msg, tokens, chash, chain) in enumerate(
            zip(messages, token_counts, content_hashes, chains, strict=True), start=1)
    ]


def message_params(m: Message, json: Callable[[Any], Any]) -> tuple[Any, ...]:
    """A new message's INSERT_MESSAGE parameters, its JSON made by ``json``."""
    return (m.id, m.session_id, m.user_id, m.turn_index, m.role, m.content, m.token_count,
            m.created_at, m.name, json(m.tool_calls) if m.tool_calls is not None else None,
            m.tool_call_id, m.content_hash, m.model, m.finish_reason, m.prompt_tokens,
            m.completion_tokens, m.latency_ms, False, None, False, json(m.metadata),
            m.chain_hash, m.sanitized)


class SharedMessages(Part):
    """Messages: the plain reads. ``_needs_embedding`` is the test and order of
    messages_missing_embedding, as the backend's index keeps them."""

    _needs_embedding: str

    def last_chain_hash(self, user_id: str, session_id: str) -> str | None:
        rows = self._rows(self._sql(
            "SELECT chain_hash FROM messages WHERE user_id = ? AND session_id = ? "
            "ORDER BY turn_index DESC LIMIT 1"), (user_id, session_id))
        return rows[0][0] if rows else None

    def get_messages(
        self, user_id: str, session_id: str, *, active_only: bool = False,
        after_turn: int | None = None, before_turn: int | None = None,
        limit: int | None = None, newest_first: bool = False,
    ) -> list[Message]:
        d = self._dialect
        where = f"user_id = {d.mark} AND session_id = {d.mark}"
        params: list[Any] = [user_id, session_id]
        if active_only:
            where += f" AND {d.unflagged('is_compressed')} AND {d.unflagged('is_pruned')}"
        if after_turn is not None:
            where += f" AND turn_index > {d.mark}"
            params.append(after_turn)
        if before_turn is not None:
            where += f" AND turn_index < {d.mark}"
            params.append(before_turn)
        order = "DESC" if newest_first else "ASC"
        query = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE {where} ORDER BY turn_index {order}"
        if limit is not None:
            query += f" LIMIT {d.mark}"
            params.append(limit)
        message = self._map.message
        return [message(r) for r in self._rows(query, params)]

    def messages_missing_embedding(self, user_id: str, limit: int) -> list[Message]:
        rows = self._rows(self._sql(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND "
            f"{self._needs_embedding} LIMIT ?"), (user_id, limit))
        return [self._map.message(r) for r in rows]

    def get_message(self, user_id: str, message_id: str) -> Message | None:
        rows = self._rows(self._sql(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND message_id = ?"),
            (user_id, message_id))
        return self._map.message(rows[0]) if rows else None

    def _inactive_sessions(self, user_id: str, before: float) -> list[str]:
        """The user's sessions with messages, the newest older than ``before``: judged by
        the messages themselves, as a session's updated_at also moves when it expires."""
        rows = self._rows(self._sql(
            "SELECT session_id FROM messages WHERE user_id = ? GROUP BY session_id "
            "HAVING max(created_at) < ? ORDER BY session_id"), (user_id, before))
        return [str(r[0]) for r in rows]
