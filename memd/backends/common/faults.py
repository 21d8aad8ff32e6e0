"""The faults of context virtualization (``memd.engine.virtual.faults``): what the model
asked memd for while its history was held at lower fidelities, written once for both
dialects."""

from __future__ import annotations

import json

from memd.backends.common.connection import Part
from memd.context_objects import Fault

COLUMNS = ("fault_id, session_id, call_id, kind, question, answer, object_ids, "
           "tokens_avoided, latency_ms, turn, created_at")


class Faults(Part):
    """``add_fault`` and ``faults`` (memd.backends.base.ContextObjectStore)."""

    def add_fault(self, user_id: str, fault: Fault) -> None:
        self._write(self._sql(
            f"INSERT INTO fault_history (user_id, {COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            (user_id, fault.fault_id, fault.session_id, fault.call_id, fault.kind,
             fault.question, fault.answer, json.dumps(list(fault.object_ids)),
             fault.tokens_avoided, fault.latency_ms, fault.turn, fault.created_at))

    def faults(self, user_id: str, session_id: str) -> list[Fault]:
        rows = self._rows(self._sql(
            f"SELECT {COLUMNS} FROM fault_history WHERE user_id = ? AND session_id = ? "
            "ORDER BY fault_id"), (user_id, session_id))
        return [Fault(fault_id=str(r[0]), session_id=str(r[1]), call_id=r[2],
                      kind=str(r[3]), question=str(r[4]), answer=str(r[5]),
                      object_ids=tuple(json.loads(r[6])), tokens_avoided=int(r[7]),
                      latency_ms=int(r[8]), turn=int(r[9]), created_at=float(r[10]))
                for r in rows]
