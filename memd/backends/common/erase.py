"""Erasure: every row of a user, or of one session, in every table, written once for both
dialects (``memd forget --all``, ``DELETE /v1/users/{id}``, ``DELETE /v1/sessions/{id}``).

:func:`erase_plan` lists the deletes in the order their subqueries need (the rows derived
from memories and messages go before them). A backend adds what lives beside those rows
(:meth:`ErasureMixin._before_erase`: SQLite's full-text and vec0 rows) and removes the
rows no user column names (:meth:`ErasureMixin._erase_shared`): the user's account, the
system prompts only the erased sessions used, and the embedding cache's entries of the
erased texts, whose keys the engine computes (they are the embedder's text hashes).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from memd.backends.common.dialect import SqlMixin

#: Tables holding one user's rows, keyed by a ``user_id`` column, that erasure empties
#: of the user; the account tables and the shared ones are :data:`ACCOUNT_TABLES` and
#: :data:`SHARED_TABLES`. tests/test_erase.py checks this against the schema.
USER_TABLES = ("memory_entities", "memories", "facts", "forgotten", "jobs", "calls",
               "usage_log", "messages", "sessions")
ACCOUNT_TABLES = ("workspace_members", "api_keys", "users")  # keys and members first
SHARED_TABLES = ("system_prompts", "embedding_cache")

Step = tuple[str, str, tuple[Any, ...]]  # (table, WHERE clause with ? marks, parameters)


def erase_plan(user_id: str, session_id: str | None, json_text: str,
               memory_side_tables: Sequence[str] = ()) -> list[Step]:
    """The deletes that erase ``user_id`` (every row), or with ``session_id`` that session:
    its messages, the session, and what derives from them (memories made in it or from
    its messages, with their entity links; facts stated in its messages; its calls, usage
    and jobs). ``json_text`` spells a JSON payload's text field (``{column}``, ``{key}``);
    ``memory_side_tables`` are further tables keyed by (user_id, memory_id)."""
    u = (user_id,)
    if session_id is None:
        tables = (*USER_TABLES[:1], *memory_side_tables, *USER_TABLES[1:])
        return [(t, "user_id = ?", u) for t in tables]
    us = (user_id, session_id)
    messages = "SELECT message_id FROM messages WHERE user_id = ? AND session_id = ?"
    memories = f"user_id = ? AND (session_id = ? OR provenance_message_id IN ({messages}))"
    of_memories = f"user_id = ? AND memory_id IN (SELECT memory_id FROM memories WHERE {memories})"
    field = json_text.format
    jobs = (f"user_id = ? AND ({field(column='payload', key='session_id')} = ? "
            f"OR {field(column='payload', key='message_id')} IN ({messages}))")
    return [
        *[(t, of_memories, (user_id, *us, *us)) for t in ("memory_entities",
                                                         *memory_side_tables)],
        ("memories", memories, (*us, *us)),
        ("facts", f"user_id = ? AND source_message_id IN ({messages})", (user_id, *us)),
        ("jobs", jobs, (*us, *us)),
        ("calls", "user_id = ? AND session_id = ?", us),
        ("usage_log", "user_id = ? AND session_id = ?", us),
        ("messages", "user_id = ? AND session_id = ?", us),
        ("sessions", "user_id = ? AND session_id = ?", us),
    ]


class ErasureMixin(SqlMixin):
    """``erase_user``, ``erase_session`` and ``delete_call`` over the plan above."""

    #: How the dialect reads a text field of a JSON column ({column}, {key}).
    _json_text: str
    #: Further tables keyed by (user_id, memory_id) (PostgreSQL's memory_stats).
    _memory_side_tables: tuple[str, ...] = ()

    def transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError  # the backend's (Lifecycle.transaction)

    def erase_user(self, user_id: str, cached: Sequence[str] = ()) -> dict[str, int]:
        return self._erase(user_id, None, cached)

    def erase_session(self, user_id: str, session_id: str,
                      cached: Sequence[str] = ()) -> dict[str, int]:
        return self._erase(user_id, session_id, cached)

    def delete_call(self, user_id: str, call_id: str) -> bool:
        return self._write(self._sql("DELETE FROM calls WHERE user_id = ? AND call_id = ?"),
                           (user_id, call_id)) > 0

    def _erase(self, user_id: str, session_id: str | None,
               cached: Sequence[str]) -> dict[str, int]:
        plan = erase_plan(user_id, session_id, self._json_text, self._memory_side_tables)
        where = {t: (w, p) for t, w, p in plan}
        counts: dict[str, int] = {}
        with self.transaction():
            test, params = where["sessions"]
            prompts = sorted({str(r[0]) for r in self._rows(self._sql(
                f"SELECT system_prompt_hash FROM sessions WHERE {test} "
                "AND system_prompt_hash IS NOT NULL"), params)})
            if session_id is not None:  # a memory erased may have replaced one that stays
                test, params = where["memories"]
                self._write(self._sql(
                    "UPDATE memories SET superseded_by = NULL WHERE user_id = ? AND "
                    f"superseded_by IN (SELECT memory_id FROM memories WHERE {test})"),
                    (user_id, *params))
            self._before_erase(user_id, where)
            for table, test, params in plan:
                counts[table] = self._write(self._sql(f"DELETE FROM {table} WHERE {test}"),
                                            params)
            counts.update(self._erase_shared(user_id, prompts, list(dict.fromkeys(cached)),
                                             account=session_id is None))
        return counts

    def _before_erase(self, user_id: str,
                      where: dict[str, tuple[str, tuple[Any, ...]]]) -> None:
        """Remove what lives beside the memories and messages about to be deleted
        (``where`` holds each table's WHERE clause and parameters)."""

    def _erase_shared(self, user_id: str, prompts: Sequence[str], cached: Sequence[str],
                      *, account: bool) -> dict[str, int]:
        """Delete the user's account rows (with ``account``), the system prompts of
        ``prompts`` no session uses any more, and the embedding cache's ``cached``
        entries; the counts by table."""
        counts = {}
        if account:
            for table in ACCOUNT_TABLES:
                counts[table] = self._write(self._sql(f"DELETE FROM {table} WHERE user_id = ?"),
                                            (user_id,))
        counts["system_prompts"] = sum(self._write(self._sql(
            "DELETE FROM system_prompts WHERE prompt_hash = ? AND NOT EXISTS "
            "(SELECT 1 FROM sessions WHERE system_prompt_hash = ?)"), (h, h)) for h in prompts)
        counts["embedding_cache"] = sum(self._write(self._sql(
            "DELETE FROM embedding_cache WHERE content_hash = ?"), (h,)) for h in cached)
        return counts
