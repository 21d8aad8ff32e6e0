"""Sessions and the system prompts they name (memd.backends.roles.SessionStore), the same
SQL on both backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memd.backends.common.columns import SESSION_COLUMNS, SESSION_UPDATABLE, marks
from memd.backends.common.connection import Part
from memd.errors import NotFound
from memd.types import Session, SessionStatus

_IDS_PER_READ = 500  # session ids per statement (SQLite binds one parameter each)


class Sessions(Part):
    """Sessions: create, read, update, expire; the system prompt registry."""

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

    def get_sessions(self, user_id: str, session_ids: Sequence[str]) -> list[Session]:
        out: list[Session] = []
        ids = list(dict.fromkeys(session_ids))
        for start in range(0, len(ids), _IDS_PER_READ):
            test, values = self._dialect.among("session_id", ids[start:start + _IDS_PER_READ])
            rows = self._rows(
                f"SELECT {SESSION_COLUMNS} FROM sessions "
                f"WHERE user_id = {self._dialect.mark} AND {test}", (user_id, *values))
            out += [self._map.session(r) for r in rows]
        return out

    def list_sessions(
        self, user_id: str, limit: int = 50, *, after: tuple[float, str] | None = None,
        workspace: str | None = None, client: str | None = None,
    ) -> list[Session]:
        where = ["user_id = ?"]
        params: list[Any] = [user_id]
        if after is not None:  # the page after the session (created_at, id) ended the last
            where.append("(created_at < ? OR (created_at = ? AND session_id > ?))")
            params += [after[0], after[0], after[1]]
        if workspace is not None:
            where.append("workspace = ?")
            params.append(workspace)
        if client is not None:
            d = self._dialect  # the identity's client, else the one an import named
            where.append(f"COALESCE({d.json_text('metadata', 'identity', 'client')}, "
                         f"{d.json_text('metadata', 'client')}) = ?")
            params.append(client)
        rows = self._rows(self._sql(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, session_id LIMIT ?"), (*params, limit))
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
