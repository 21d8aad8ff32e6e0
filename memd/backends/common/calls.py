"""Calls and usage (memd.backends.service_roles.CallStore), the same SQL on both backends."""

from __future__ import annotations

from typing import Any

from memd.backends.common.columns import CALL_COLUMNS, USAGE_COLUMNS, marks
from memd.backends.common.connection import Part
from memd.backends.common.queries import calls_query
from memd.types import Usage


class Calls(Part):
    """Each proxied call's record and report, and the usage log."""

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

    def list_usage(self, user_id: str, limit: int = 100) -> list[Usage]:
        rows = self._rows(self._sql(
            f"SELECT {USAGE_COLUMNS} FROM usage_log WHERE user_id = ? "
            "ORDER BY created_at DESC, usage_id LIMIT ?"), (user_id, limit))
        return [self._map.usage(r) for r in rows]
