"""Erasure: every row of a user, of one session or of one message, in every table, written
once for both dialects (``memd forget --all``, ``DELETE /v1/users/{id}``,
``DELETE /v1/sessions/{id}``, ``DELETE /v1/sessions/{id}/messages/{message_id}``).

:func:`erase_plan` lists the deletes in the order their subqueries need (the rows derived
from memories and messages go before them). A backend adds what lives beside those rows
(:meth:`Erasure._before_erase`: SQLite's full-text and vec0 rows) and removes the
rows no user column names (:meth:`Erasure._erase_shared`): the user's account, the
system prompts only the erased sessions used, and the embedding cache's entries of the
erased texts, whose keys the engine computes (they are the embedder's text hashes).

Pruning (:meth:`Erasure.prune_messages`) is the lossless kind of forgetting: the
messages a forgotten memory or fact came from stay for their owner, flagged
``is_pruned``, and lose what memd reads them through (vector, full-text row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from memd.backends.common.columns import MESSAGE_COLUMNS
from memd.backends.common.connection import Part
from memd.backends.common.queries import BUMP_HISTORY_VERSION
from memd.backends.common.rows import RowMappers
from memd.types import Message

#: Tables holding one user's rows, keyed by a ``user_id`` column, that erasure empties
#: of the user; the account tables and the shared ones are :data:`ACCOUNT_TABLES` and
#: :data:`SHARED_TABLES`. tests/test_erase.py checks this against the schema.
USER_TABLES = ("memory_entities", "memories", "facts", "forgotten", "paragraphs_seen",
               "response_sessions", "fault_history", "admission_decisions",
               "fidelity_transitions",
               "context_objects", "learning_paused", "jobs", "calls", "usage_log",
               "messages", "sessions")
ACCOUNT_TABLES = ("workspace_members", "api_keys", "users")  # keys and members first
SHARED_TABLES = ("system_prompts", "embedding_cache")

#: The user id of anonymized usage rows: no user's, since no valid id has parentheses.
ERASED_USER = "(erased)"

Step = tuple[str, str, tuple[Any, ...]]  # (table, WHERE clause with ? marks, parameters)


def erase_plan(user_id: str, session_id: str | None, json_text: str,
               memory_side_tables: Sequence[str] = (),
               message_id: str | None = None) -> list[Step]:
    """The deletes that erase ``user_id`` (every row), or with ``session_id`` that session:
    its messages, the session, and what derives from them (memories made in it or from
    its messages, with their entity links; facts stated in its messages; its calls, usage
    and jobs); or with ``message_id`` too, that one message of the session and what
    derives from it (memories made from it, facts it stated, its jobs). ``json_text``
    spells a JSON payload's text field (``{column}``, ``{key}``); ``memory_side_tables``
    are further tables keyed by (user_id, memory_id)."""
    u = (user_id,)
    if session_id is None:
        tables = (*USER_TABLES[:1], *memory_side_tables, *USER_TABLES[1:])
        return [(t, "user_id = ?", u) for t in tables]
    field = json_text.format
    of = "user_id = ? AND memory_id IN (SELECT memory_id FROM memories WHERE {})".format
    if message_id is not None:
        um = (user_id, message_id)
        # the context objects made of it: a tool result, by its tool call
        held = ("SELECT object_id FROM context_objects WHERE user_id = ? AND session_id = ? "
                "AND tool_call_id IN (SELECT tool_call_id FROM messages WHERE user_id = ? "
                "AND message_id = ?)")
        held_by = (user_id, session_id, *um)
        # the memories made from it, and the summary its turn was compacted into
        memories = ("user_id = ? AND (provenance_message_id = ? OR memory_id IN (SELECT "
                    "compressed_summary_id FROM messages WHERE user_id = ? AND message_id = ?))")
        return [
            *[(t, of(memories), (user_id, *um, *um)) for t in ("memory_entities",
                                                               *memory_side_tables)],
            ("memories", memories, (*um, *um)),
            ("facts", "user_id = ? AND source_message_id = ?", um),
            ("paragraphs_seen", "user_id = ? AND first_message_id = ?", um),
            # the faults whose answers came from those objects (they may quote them)
            ("fault_history", "user_id = ? AND session_id = ? AND EXISTS (SELECT 1 FROM "
             f"context_objects c WHERE c.user_id = ? AND c.object_id IN ({held}) AND "
             "fault_history.object_ids LIKE ? || c.object_id || ?)",
             (user_id, session_id, user_id, *held_by, '%"', '"%')),
            ("fidelity_transitions", f"user_id = ? AND object_id IN ({held})",
             (user_id, *held_by)),
            ("admission_decisions", f"user_id = ? AND object_id IN ({held})",
             (user_id, *held_by)),
            ("context_objects", f"user_id = ? AND object_id IN ({held})", (user_id, *held_by)),
            ("jobs", f"user_id = ? AND {field(column='payload', key='message_id')} = ?", um),
            ("messages", "user_id = ? AND session_id = ? AND message_id = ?",
             (user_id, session_id, message_id)),
        ]
    us = (user_id, session_id)
    messages = "SELECT message_id FROM messages WHERE user_id = ? AND session_id = ?"
    memories = f"user_id = ? AND (session_id = ? OR provenance_message_id IN ({messages}))"
    of_memories = of(memories)
    jobs = (f"user_id = ? AND ({field(column='payload', key='session_id')} = ? "
            f"OR {field(column='payload', key='message_id')} IN ({messages}))")
    return [
        *[(t, of_memories, (user_id, *us, *us)) for t in ("memory_entities",
                                                         *memory_side_tables)],
        ("memories", memories, (*us, *us)),
        ("facts", f"user_id = ? AND source_message_id IN ({messages})", (user_id, *us)),
        ("paragraphs_seen", "user_id = ? AND first_session_id = ?", us),
        ("response_sessions", "user_id = ? AND session_id = ?", us),
        ("fault_history", "user_id = ? AND session_id = ?", us),
        ("admission_decisions", "user_id = ? AND session_id = ?", us),
        ("fidelity_transitions", "user_id = ? AND session_id = ?", us),
        ("context_objects", "user_id = ? AND session_id = ?", us),
        ("jobs", jobs, (*us, *us)),
        ("calls", "user_id = ? AND session_id = ?", us),
        ("usage_log", "user_id = ? AND session_id = ?", us),
        ("messages", "user_id = ? AND session_id = ?", us),
        ("sessions", "user_id = ? AND session_id = ?", us),
    ]


class Erasure(Part):
    """``erase_user``, ``erase_session``, ``erase_message`` and ``delete_call`` over the
    plan above; a backend adds ``scrub`` and ``deep_scrub`` (what its files keep of a
    deleted row) and what lives beside the rows it deletes."""

    #: How the dialect reads a text field of a JSON column ({column}, {key}).
    _json_text: str
    #: Further tables keyed by (user_id, memory_id) (PostgreSQL's memory_stats).
    _memory_side_tables: tuple[str, ...] = ()
    #: What else a pruned message's UPDATE sets: its vector goes (SQLite's vec0 row goes
    #: in _before_prune, and has_embedding is cleared; PostgreSQL's column is nulled).
    _unembed: str = ""
    _map: RowMappers  # the backend's row mappers

    def erase_user(self, user_id: str, cached: Sequence[str] = (),
                   anonymize_usage: bool = False) -> dict[str, int]:
        return self._erase(user_id, None, cached, anonymize_usage=anonymize_usage)

    def erase_session(self, user_id: str, session_id: str, cached: Sequence[str] = (),
                      anonymize_usage: bool = False) -> dict[str, int]:
        return self._erase(user_id, session_id, cached, anonymize_usage=anonymize_usage)

    def erase_message(self, user_id: str, session_id: str, message_id: str,
                      cached: Sequence[str] = ()) -> dict[str, int]:
        return self._erase(user_id, session_id, cached, message_id)

    def delete_call(self, user_id: str, call_id: str) -> bool:
        return self._write(self._sql("DELETE FROM calls WHERE user_id = ? AND call_id = ?"),
                           (user_id, call_id)) > 0

    def _erase(self, user_id: str, session_id: str | None, cached: Sequence[str],
               message_id: str | None = None, anonymize_usage: bool = False
               ) -> dict[str, int]:
        plan = erase_plan(user_id, session_id, self._json_text, self._memory_side_tables,
                          message_id)
        if anonymize_usage:
            plan = [step for step in plan if step[0] != "usage_log"]
        where = {t: (w, p) for t, w, p in plan}
        counts: dict[str, int] = {}
        with self.transaction():
            prompts: list[str] = []
            if "sessions" in where:
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
            if message_id is not None and counts["messages"]:
                # The stored history changed other than by an append: caches keyed by
                # (turn_count, history_version) must read it again. The session's title
                # and its summary may quote the message: they go too (the next user
                # message titles it; compacted turns are then not summarized).
                self._write(self._sql(
                    "UPDATE sessions SET history_version = history_version + 1, "
                    "title = NULL, summary_text = NULL, summary_token_count = 0 "
                    "WHERE user_id = ? AND session_id = ?"), (user_id, session_id))
            if anonymize_usage:
                counts["usage_log"] = 0
                counts["usage_log_anonymized"] = self._anonymize_usage(user_id, session_id)
            counts.update(self._erase_shared(user_id, prompts, list(dict.fromkeys(cached)),
                                             account=session_id is None))
        return counts

    def prune_messages(self, user_id: str, message_ids: Sequence[str]) -> list[Message]:
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return []
        d = self._dialect
        among, among_params = d.among("message_id", ids)
        where = f"user_id = {d.mark} AND {among} AND {d.unflagged('is_pruned')}"
        params = (user_id, *among_params)
        with self.transaction():
            found = [self._map.message(r) for r in self._rows(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE {where} "
                "ORDER BY session_id, turn_index", params)]
            if not found:
                return []
            self._before_prune(user_id, where, params)
            self._write(f"UPDATE messages SET is_pruned = {d.true}{self._unembed} "
                        f"WHERE {where}", params)
            for session_id in sorted({m.session_id for m in found}):
                self._write(self._sql(BUMP_HISTORY_VERSION), (user_id, session_id))
        return [replace(m, is_pruned=True) for m in found]

    def _before_prune(self, user_id: str, where: str, params: tuple[Any, ...]) -> None:
        """Remove what lives beside the messages about to be pruned (``where``, in the
        driver's placeholders, with ``params``)."""

    def _anonymize_usage(self, user_id: str, session_id: str | None) -> int:
        """Keep the user's usage rows (of ``session_id`` only, when given) with nothing
        that names the user: user :data:`ERASED_USER`, no session, workspace or
        metadata; how many."""
        where: str = "user_id = ?"
        params: tuple[str, ...] = (user_id,)
        if session_id is not None:  # a session's rows only
            where, params = "user_id = ? AND session_id = ?", (user_id, session_id)
        return self._write(self._sql(
            "UPDATE usage_log SET user_id = ?, session_id = NULL, workspace = '', "
            f"metadata = '{{}}' WHERE {where}"), (ERASED_USER, *params))

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
