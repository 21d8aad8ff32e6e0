"""The Store methods whose SQL both dialects agree on, written once over
:class:`~memd.backends.common.dialect.SqlMixin`. A backend overrides a method here only
where its SQL must differ."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from memd.backends.common.columns import (
    CALL_COLUMNS,
    FACT_COLUMNS,
    JOB_COLUMNS,
    MEMORY_COLUMNS,
    MEMORY_ORDERS,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    SESSION_UPDATABLE,
    USAGE_COLUMNS,
    marks,
)
from memd.backends.common.context_objects import ContextObjectsMixin
from memd.backends.common.erase import ErasureMixin
from memd.backends.common.faults import FaultsMixin
from memd.backends.common.migrations import (
    COPYING_KEY,
    DEFERRED_INDEX_KEY,
    UNFINISHED_PREFIX,
)
from memd.backends.common.queries import calls_query
from memd.backends.common.rows import RowMappers
from memd.errors import NotFound
from memd.types import (
    Fact,
    Memory,
    MemoryFilter,
    Message,
    NewMessage,
    ParagraphSeen,
    QueuedJob,
    Session,
    SessionStatus,
    Usage,
)

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


class PortableStore(ContextObjectsMixin, FaultsMixin, ErasureMixin):
    """Sessions, facts, calls, usage, jobs, erasure and the plain reads of messages and
    memories.
    ``_map`` holds the backend's row mappers, ``_json`` makes a JSON parameter,
    ``_memory_rows`` names what memories with their stats are read from.

    The SQL is written with ``?`` marks (``self._sql`` swaps them) and the dialect's
    spellings for flags and conflicts."""

    _map: RowMappers
    _json: Callable[[Any], Any]
    _memory_rows: str = "memories"
    # The test and order of messages_missing_embedding, as the backend's index keeps them.
    _needs_embedding: str

    def _where(self, user_id: str, flt: MemoryFilter) -> tuple[str, list[Any]]:
        """SQL for ``flt`` over memories (bare column names) and its parameters."""
        raise NotImplementedError

    def _write_new(self, query: str, params: Sequence[Any]) -> int:
        """An insert of a row with a fresh id: it cannot conflict."""
        return self._write(query, params)

    def schema_version(self) -> int:
        return int(self._rows("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0])

    def unfinished_copy(self) -> list[str]:
        rows = self._rows(self._sql("SELECT key, value FROM schema_meta WHERE key LIKE ?"),
                          (UNFINISHED_PREFIX + "%",))
        tables: set[str] = set()
        for key, value in rows:
            if key == COPYING_KEY:
                tables.update(t for t in str(value or "").split(",") if t)
            elif str(key).startswith(DEFERRED_INDEX_KEY):
                tables.add(str(key)[len(DEFERRED_INDEX_KEY):].split(".")[0])
        return sorted(tables)

    # -- sessions --------------------------------------------------------------------
    def create_session(self, session: Session) -> Session:
        s = session
        self._write(
            f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({marks(self._dialect.mark, 22)})",
            (s.id, s.user_id, s.workspace or "", s.created_at, s.updated_at, s.expires_at,
             int(s.status), s.model, s.context_window, s.system_prompt_hash,
             s.system_prompt_tokens, s.max_response_tokens, s.turn_count,
             s.total_prompt_tokens, s.total_completion_tokens, s.total_cost_microcents,
             s.summary_text, s.summary_token_count, s.parent_session_id, self._json(s.metadata),
             s.history_version, s.title),
        )
        return session

    def get_session(self, user_id: str, session_id: str) -> Session | None:
        rows = self._rows(self._sql(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE user_id = ? AND session_id = ?"),
            (user_id, session_id))
        return self._map.session(rows[0]) if rows else None

    def list_sessions(self, user_id: str, limit: int = 50) -> list[Session]:
        rows = self._rows(self._sql(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE user_id = ? "
            "ORDER BY created_at DESC, session_id LIMIT ?"), (user_id, limit))
        return [self._map.session(r) for r in rows]

    def update_session(self, user_id: str, session_id: str, **changes: Any) -> None:
        bad = set(changes) - SESSION_UPDATABLE
        if bad:
            raise ValueError(f"not updatable on a session: {sorted(bad)}")
        if not changes:
            return
        values = [
            self._json(v) if k == "metadata" else int(v) if k == "status" else v
            for k, v in changes.items()
        ]
        sets = ", ".join(f"{k} = ?" for k in changes)  # names checked against the list above
        if not self._write(
            self._sql(f"UPDATE sessions SET {sets} WHERE user_id = ? AND session_id = ?"),
            (*values, user_id, session_id),
        ):
            raise NotFound(f"no session {session_id!r} for user {user_id!r}")

    def set_session_title(self, user_id: str, session_id: str, title: str, *,
                          replace: bool = False) -> bool:
        d = self._dialect
        return bool(self._write(d.sql(
            "UPDATE sessions SET title = ? WHERE user_id = ? AND session_id = ?"
            + ("" if replace else " AND title IS NULL")), (title, user_id, session_id)))

    def add_session_usage(
        self, user_id: str, session_id: str, prompt_tokens: int, completion_tokens: int,
        cost_microcents: int, now: float,
    ) -> None:
        self._write(self._sql(
            "UPDATE sessions SET total_prompt_tokens = total_prompt_tokens + ?, "
            "total_completion_tokens = total_completion_tokens + ?, "
            "total_cost_microcents = total_cost_microcents + ?, updated_at = ? "
            "WHERE user_id = ? AND session_id = ?"),
            (prompt_tokens, completion_tokens, cost_microcents, now, user_id, session_id))

    def register_system_prompt(self, prompt_hash: str, text: str, token_count: int) -> None:
        d = self._dialect
        self._write(d.sql(f"{d.ignore_prefix} system_prompts (prompt_hash, text, token_count) "
                          f"VALUES (?, ?, ?){d.ignore_suffix}"),
                    (prompt_hash, text, token_count))

    def get_system_prompt(self, prompt_hash: str) -> str | None:
        rows = self._rows(self._sql("SELECT text FROM system_prompts WHERE prompt_hash = ?"),
                          (prompt_hash,))
        return rows[0][0] if rows else None

    def expire_sessions(self, now: float) -> int:
        return self._write(self._sql(
            "UPDATE sessions SET status = ?, updated_at = ? WHERE expires_at IS NOT NULL "
            "AND expires_at <= ? AND status <> ?"),
            (int(SessionStatus.EXPIRED), now, now, int(SessionStatus.EXPIRED)))

    def session_users(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT user_id FROM sessions ORDER BY user_id")]

    def _inactive_sessions(self, user_id: str, before: float) -> list[str]:
        """The user's sessions with messages, the newest older than ``before``: judged by
        the messages themselves, as a session's updated_at also moves when it expires."""
        rows = self._rows(self._sql(
            "SELECT session_id FROM messages WHERE user_id = ? GROUP BY session_id "
            "HAVING max(created_at) < ? ORDER BY session_id"), (user_id, before))
        return [str(r[0]) for r in rows]

    # -- messages --------------------------------------------------------------------
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

    # -- memories --------------------------------------------------------------------
    def get_memory(self, user_id: str, memory_id: str) -> Memory | None:
        rows = self._rows(self._sql(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} "
            "WHERE user_id = ? AND memory_id = ?"), (user_id, memory_id))
        return self._map.memory(rows[0]) if rows else None

    def find_memory_id(self, memory_id: str) -> tuple[str, Memory] | None:
        rows = self._rows(self._sql(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} WHERE memory_id = ?"),
            (memory_id,))
        if not rows:
            return None
        mem = self._map.memory(rows[0])
        return mem.user_id, mem

    def find_by_hash(
        self, user_id: str, workspace: str | None, content_hash: str
    ) -> Memory | None:
        rows = self._rows(self._sql(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} WHERE user_id = ? "
            f"AND content_hash = ? AND workspace = ? AND {self._dialect.flag('is_active')} "
            "ORDER BY created_at, memory_id LIMIT 1"), (user_id, content_hash, workspace or ""))
        return self._map.memory(rows[0]) if rows else None

    def list_memories(
        self, user_id: str, flt: MemoryFilter, limit: int = 100, offset: int = 0,
        order: str = "created_at",
    ) -> list[Memory]:
        if order not in MEMORY_ORDERS:
            raise ValueError(f"cannot order memories by {order!r}")
        where, params = self._where(user_id, flt)
        mark = self._dialect.mark
        rows = self._rows(
            f"SELECT {MEMORY_COLUMNS} FROM {self._memory_rows} WHERE {where} "
            f"ORDER BY {order} DESC, memory_id LIMIT {mark} OFFSET {mark}",
            (*params, limit, offset))
        return [self._map.memory(r) for r in rows]

    def count_memories(self, user_id: str, flt: MemoryFilter) -> int:
        where, params = self._where(user_id, flt)
        return int(self._rows(f"SELECT count(*) FROM memories WHERE {where}", params)[0][0])

    def max_access_count(self, user_id: str) -> int:
        rows = self._rows(self._sql(
            f"SELECT max(access_count) FROM {self._memory_rows} WHERE user_id = ? "
            f"AND {self._dialect.flag('is_active')}"), (user_id,))
        return int(rows[0][0] or 0)

    def memory_users(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT user_id FROM memories ORDER BY user_id")]

    def link_entities(self, user_id: str, memory_id: str, entities: Sequence[str]) -> None:
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} memory_entities (user_id, entity, memory_id) "
                  f"VALUES (?, ?, ?){d.ignore_suffix}"),
            [(user_id, e, memory_id) for e in dict.fromkeys(entities)])

    # -- facts -----------------------------------------------------------------------
    def get_facts(
        self, user_id: str, workspaces: tuple[str, ...] | None = None,
        active_only: bool = True, category: str | None = None, key: str | None = None,
    ) -> list[Fact]:
        d = self._dialect
        clauses, params = [f"user_id = {d.mark}"], [user_id]
        if active_only:
            clauses.append(d.flag("is_active"))
        if workspaces is not None:
            test, values = d.among("workspace", workspaces)
            clauses.append(test)
            params.extend(values)
        for column, value in (("category", category), ("key", key)):
            if value is not None:
                clauses.append(f"{column} = {d.mark}")
                params.append(value)
        rows = self._rows(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE {' AND '.join(clauses)} "
            "ORDER BY importance DESC, category, key, created_at, fact_id", params)
        return [self._map.fact(r) for r in rows]

    def insert_fact(self, fact: Fact) -> Fact:
        f = fact
        self._write(
            f"INSERT INTO facts ({FACT_COLUMNS}) VALUES ({marks(self._dialect.mark, 14)})",
            (f.id, f.user_id, f.category, f.key, f.value, f.confidence, f.importance,
             f.created_at, f.updated_at, f.workspace or "", f.is_active, f.superseded_by,
             f.source_message_id, self._json(f.metadata)))
        return fact

    def supersede_fact(self, user_id: str, fact_id: str, by: str, now: float) -> None:
        self._write(self._sql(
            f"UPDATE facts SET is_active = {self._dialect.false}, superseded_by = ?, "
            "updated_at = ? WHERE user_id = ? AND fact_id = ?"), (by, now, user_id, fact_id))

    def delete_facts(self, user_id: str, fact_ids: Sequence[str]) -> int:
        if not fact_ids:
            return 0
        test, values = self._dialect.among("fact_id", fact_ids)
        return self._write(f"DELETE FROM facts WHERE user_id = {self._dialect.mark} AND {test}",
                           (user_id, *values))

    # -- what was forgotten ----------------------------------------------------------
    def add_forgotten(self, user_id: str, digests: Sequence[str], now: float) -> None:
        if not digests:
            return
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} forgotten (user_id, digest, created_at) "
                  f"VALUES (?, ?, ?){d.ignore_suffix}"),
            [(user_id, digest, now) for digest in dict.fromkeys(digests)])

    def forgotten(self, user_id: str, digests: Sequence[str]) -> set[str]:
        if not digests:
            return set()
        test, values = self._dialect.among("digest", list(dict.fromkeys(digests)))
        rows = self._rows(f"SELECT digest FROM forgotten WHERE user_id = {self._dialect.mark} "
                          f"AND {test}", (user_id, *values))
        return {str(r[0]) for r in rows}

    # -- paragraphs seen in user messages --------------------------------------------
    def see_paragraphs(self, user_id: str, session_id: str, message_id: str,
                       keys: Sequence[str], now: float) -> list[ParagraphSeen]:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        d = self._dialect
        test, values = d.among("paragraph_hash", keys)
        known = {str(r[0]): r for r in self._rows(
            "SELECT paragraph_hash, first_session_id, first_message_id, last_session_id, "
            f"sessions FROM paragraphs_seen WHERE user_id = {d.mark} AND {test}",
            (user_id, *values))}
        seen: list[ParagraphSeen] = []
        for key in keys:
            row = known.get(key)
            if row is None:
                self._write(d.sql(
                    f"{d.ignore_prefix} paragraphs_seen (user_id, paragraph_hash, "
                    "first_session_id, first_message_id, last_session_id, sessions, "
                    f"first_seen, last_seen) VALUES (?, ?, ?, ?, ?, 1, ?, ?){d.ignore_suffix}"),
                    (user_id, key, session_id, message_id, session_id, now, now))
                seen.append(ParagraphSeen(key, session_id, message_id, 1, True))
                continue
            fresh = row[3] != session_id
            if fresh:
                self._write(self._sql(
                    "UPDATE paragraphs_seen SET sessions = sessions + 1, last_session_id = ?, "
                    "last_seen = ? WHERE user_id = ? AND paragraph_hash = ?"),
                    (session_id, now, user_id, key))
            seen.append(ParagraphSeen(key, str(row[1]), str(row[2]), int(row[4]) + fresh,
                                      fresh))
        return seen

    def recurring_paragraphs(self, user_id: str, keys: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        test, values = self._dialect.among("paragraph_hash", list(dict.fromkeys(keys)))
        rows = self._rows(
            f"SELECT paragraph_hash FROM paragraphs_seen WHERE user_id = {self._dialect.mark} "
            f"AND sessions > 1 AND {test}", (user_id, *values))
        return {str(r[0]) for r in rows}

    # -- the sessions of answers kept upstream ----------------------------------------
    def link_response(self, user_id: str, response_id: str, session_id: str,
                      now: float) -> None:
        d = self._dialect
        self._write(d.sql(f"{d.ignore_prefix} response_sessions (user_id, response_id, "
                          f"session_id, created_at) VALUES (?, ?, ?, ?){d.ignore_suffix}"),
                    (user_id, response_id, session_id, now))

    def response_session(self, user_id: str, response_id: str) -> str | None:
        rows = self._rows(self._sql(
            "SELECT session_id FROM response_sessions WHERE user_id = ? AND response_id = ?"),
            (user_id, response_id))
        return str(rows[0][0]) if rows else None

    # -- calls and usage -------------------------------------------------------------
    def record_call(
        self, call_id: str, user_id: str, session_id: str | None, workspace: str | None,
        model: str | None, now: float, report: dict[str, Any], status: int | None = None,
    ) -> None:
        self._write(self._sql(
            "INSERT INTO calls (call_id, user_id, session_id, workspace, model_id, created_at, "
            "status, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
            (call_id, user_id, session_id, workspace or "", model, now, status,
             self._json(report)))

    def finish_call(self, call_id: str, status: int, metadata: dict[str, Any],
                    report: dict[str, Any] | None = None) -> None:
        if report is None:
            self._write(self._sql("UPDATE calls SET status = ?, metadata = ? WHERE call_id = ?"),
                        (status, self._json(metadata), call_id))
            return
        self._write(self._sql(
            "UPDATE calls SET status = ?, metadata = ?, report = ? WHERE call_id = ?"),
            (status, self._json(metadata), self._json(report), call_id))

    def get_call(self, user_id: str, call_id: str) -> dict[str, Any] | None:
        rows = self._rows(self._sql(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE user_id = ? AND call_id = ?"),
            (user_id, call_id))
        return self._map.call(rows[0], user_id) if rows else None

    def list_calls(
        self, user_id: str, *, session_id: str | None = None, workspace: str | None = None,
        since: float | None = None, until: float | None = None, limit: int = 50,
    ) -> list[dict[str, Any]]:
        query, params = calls_query(
            user_id, mark=self._dialect.mark, session_id=session_id,
            workspace=None if workspace is None else workspace or "",
            since=since, until=until, limit=limit)
        return [self._map.call(r, user_id) for r in self._rows(query, params)]

    def record_usage(self, usage: Usage) -> None:
        u = usage
        self._write(
            f"INSERT INTO usage_log ({USAGE_COLUMNS}) VALUES ({marks(self._dialect.mark, 11)})",
            (u.id, u.user_id, u.session_id, u.workspace or "", u.model, u.prompt_tokens,
             u.completion_tokens, u.cost_microcents, u.latency_ms, u.created_at,
             self._json(u.metadata)))

    # -- jobs ------------------------------------------------------------------------
    def enqueue_job(
        self, kind: str, payload: dict[str, Any], user_id: str | None, now: float,
        run_after: float | None = None,
    ) -> str:
        job_id = uuid.uuid4().hex
        self._write_new(self._sql(
            "INSERT INTO jobs (job_id, kind, user_id, payload, run_after, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)"),
            (job_id, kind, user_id, self._json(payload),
             now if run_after is None else run_after, now))
        return job_id

    def enqueue_job_once(
        self, job_id: str, kind: str, payload: dict[str, Any], user_id: str | None,
        now: float, run_after: float | None = None,
    ) -> bool:
        d = self._dialect
        return self._write(d.sql(
            f"{d.ignore_prefix} jobs (job_id, kind, user_id, payload, run_after, created_at) "
            f"VALUES (?, ?, ?, ?, ?, ?){d.ignore_suffix}"),
            (job_id, kind, user_id, self._json(payload),
             now if run_after is None else run_after, now)) > 0

    def reschedule_job(self, job_id: str, attempts: int, run_after: float,
                       payload: dict[str, Any], now: float) -> bool:
        return self._write(self._sql(
            "UPDATE jobs SET run_after = ?, payload = ?, attempts = 0, lease_until = NULL, "
            "last_error = NULL, updated_at = ? WHERE job_id = ? AND status = 'pending' "
            "AND attempts = ?"),
            (run_after, self._json(payload), now, job_id, attempts)) > 0

    def complete_job(self, job_id: str) -> bool:
        return self._write(self._sql("DELETE FROM jobs WHERE job_id = ?"), (job_id,)) > 0

    def fail_job(self, job_id: str, error: str, retry_at: float | None) -> None:
        if retry_at is None:
            self._write(self._sql("UPDATE jobs SET status = 'dead', last_error = ?, "
                                  "lease_until = NULL WHERE job_id = ?"), (error, job_id))
        else:
            self._write(self._sql("UPDATE jobs SET last_error = ?, run_after = ?, "
                                  "lease_until = NULL WHERE job_id = ?"),
                        (error, retry_at, job_id))

    def pending_jobs(self) -> int:
        return int(self._rows("SELECT count(*) FROM jobs WHERE status = 'pending' "
                              "AND kind <> 'schedule'")[0][0])

    _QUEUED = (f"SELECT {JOB_COLUMNS}, status, coalesce(updated_at, created_at) "
               "FROM jobs WHERE ")

    def _queued(self, r: tuple[Any, ...]) -> QueuedJob:
        return QueuedJob(job=self._map.job(r[:8]), state=r[8], updated_at=r[9])

    def list_jobs(self, state: str, user_id: str | None = None,
                  limit: int = 100) -> list[QueuedJob]:
        where, params = "status = ?", [state]
        if user_id is not None:
            where, params = where + " AND user_id = ?", [*params, user_id]
        rows = self._rows(self._sql(self._QUEUED + where
                                    + " ORDER BY created_at, job_id LIMIT ?"),
                          (*params, limit))
        return [self._queued(r) for r in rows]

    def get_job(self, job_id: str) -> QueuedJob | None:
        rows = self._rows(self._sql(self._QUEUED + "job_id = ?"), (job_id,))
        return self._queued(rows[0]) if rows else None

    def retry_dead_jobs(self, now: float, user_id: str | None = None,
                        job_id: str | None = None) -> int:
        params: list[Any]
        where, params = "status = 'dead'", [now, now]  # run_after, updated_at
        for column, value in (("user_id", user_id), ("job_id", job_id)):
            if value is not None:
                where, params = f"{where} AND {column} = ?", [*params, value]
        return self._write(self._sql(
            "UPDATE jobs SET status = 'pending', attempts = 0, run_after = ?, "
            f"lease_until = NULL, updated_at = ? WHERE {where}"), params)

    # -- embedding cache -------------------------------------------------------------
    def put_cached_embeddings(self, model: str, items: Sequence[tuple[str, bytes]]) -> None:
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} embedding_cache (model, content_hash, vector) "
                  f"VALUES (?, ?, ?){d.ignore_suffix}"),
            [(model, h, v) for h, v in items])
