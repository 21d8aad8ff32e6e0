"""Calls and usage (memd.backends.service_roles.CallStore), the same SQL on both backends."""

from __future__ import annotations

from typing import Any

from memd.backends.common.columns import CALL_COLUMNS, USAGE_COLUMNS, marks
from memd.backends.common.connection import Part
from memd.backends.common.queries import calls_query
from memd.types import Usage, UsageTotal


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

    def usage_totals(
        self, user_id: str, group_by: str, *, since: float | None = None,
        until: float | None = None,
    ) -> list[UsageTotal]:
        d = self._dialect
        key = {"day": d.day_of("created_at"), "model": "model_id", "workspace": "workspace",
               "client": d.json_text("metadata", "client")}.get(group_by)
        if key is None:
            raise ValueError(f"usage is not grouped by {group_by!r}")
        where = ["user_id = ?"]
        params: list[Any] = [user_id]
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if until is not None:
            where.append("created_at < ?")
            params.append(until)
        rows = self._rows(self._sql(
            f"SELECT {key} AS k, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), "
            f"SUM(cost_microcents) FROM usage_log WHERE {' AND '.join(where)} "
            f"GROUP BY {key} ORDER BY {key}"), tuple(params))
        return [UsageTotal(key=None if r[0] is None else r[0] if group_by == "day"
                           else str(r[0]), calls=int(r[1]), prompt_tokens=int(r[2] or 0),
                           completion_tokens=int(r[3] or 0), cost_microcents=int(r[4] or 0))
                for r in rows]
