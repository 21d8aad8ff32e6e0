"""Where a user paused learning (memd.backends.service_roles.CallStore), the same SQL on
both backends: one row per paused (user, workspace), '' standing for all of the user's
workspaces."""

from __future__ import annotations

from memd.backends.common.connection import Part


class Pauses(Part):
    """``set_paused`` and ``pauses``."""

    def set_paused(self, user_id: str, workspace: str, paused: bool, now: float) -> bool:
        if not paused:
            return bool(self._write(self._sql(
                "DELETE FROM learning_paused WHERE user_id = ? AND workspace = ?"),
                (user_id, workspace)))
        d = self._dialect
        return bool(self._write(d.sql(
            f"{d.ignore_prefix} learning_paused (user_id, workspace, paused_at) "
            f"VALUES (?, ?, ?){d.ignore_suffix}"), (user_id, workspace, now)))

    def pauses(self, user_id: str) -> dict[str, float]:
        rows = self._rows(self._sql(
            "SELECT workspace, paused_at FROM learning_paused WHERE user_id = ? "
            "ORDER BY workspace"), (user_id,))
        return {str(r[0]): float(r[1]) for r in rows}
