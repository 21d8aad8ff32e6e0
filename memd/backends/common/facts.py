"""Facts: one active value per (category, key), the same SQL on both backends."""

from __future__ import annotations

from collections.abc import Sequence

from memd.backends.common.columns import FACT_COLUMNS, marks
from memd.backends.common.connection import Part
from memd.types import Fact


class Facts(Part):
    """Facts (memd.backends.roles.FactStore)."""

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
