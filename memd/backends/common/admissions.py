"""The admission decisions of context virtualization (``memd.engine.virtual.admission``):
the fidelity each tool result first entered the request at, and why, written once for
both dialects."""

from __future__ import annotations

import json
from collections.abc import Sequence

from memd.backends.common.connection import Part
from memd.context_objects import AdmissionDecision

COLUMNS = "object_id, session_id, call_id, fidelity, score, parts, created_at"


class Admissions(Part):
    """``add_admissions`` and ``admissions`` (memd.backends.base.ContextObjectStore)."""

    def add_admissions(self, user_id: str, decisions: Sequence[AdmissionDecision]) -> None:
        if not decisions:
            return
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} admission_decisions (user_id, {COLUMNS}) "
                  f"VALUES (?, ?, ?, ?, ?, ?, ?, ?){d.ignore_suffix}"),
            [(user_id, a.object_id, a.session_id, a.call_id, a.fidelity, a.score,
              json.dumps(a.parts, sort_keys=True), a.created_at) for a in decisions])

    def admissions(self, user_id: str, session_id: str) -> list[AdmissionDecision]:
        rows = self._rows(self._sql(
            f"SELECT {COLUMNS} FROM admission_decisions WHERE user_id = ? "
            "AND session_id = ? ORDER BY created_at, object_id"), (user_id, session_id))
        return [AdmissionDecision(object_id=str(r[0]), session_id=str(r[1]), call_id=r[2],
                                  fidelity=int(r[3]), score=float(r[4]),
                                  parts=json.loads(r[5]), created_at=float(r[6]))
                for r in rows]
