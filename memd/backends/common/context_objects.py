"""The objects of context virtualization (``memd.engine.virtual``) and their fidelity
transitions, written once for both dialects."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from memd.backends.common.connection import Part
from memd.context_objects import ContextObject, FidelityTransition, ObjectSummaries

OBJECT_COLUMNS = (
    "object_id, user_id, session_id, content_hash, object_type, source_tool, source_key, "
    "tool_call_id, turn_start, turn_end, content, compact, stub, tokens_l0, tokens_l2, "
    "tokens_l3, fidelity, pinned, superseded_by, created_at, updated_at, detailed, "
    "tokens_l1, summarized_by, losses, key_entities")
TRANSITION_COLUMNS = ("object_id, from_fidelity, to_fidelity, trigger, zone, tokens, "
                      "call_id, created_at")


class ContextObjects(Part):
    """``add_context_objects``, ``context_objects``, ``set_object_summaries``,
    ``apply_transitions`` and ``fidelity_transitions``
    (memd.backends.base.ContextObjectStore)."""

    def add_context_objects(self, objects: Sequence[ContextObject]) -> int:
        if not objects:
            return 0
        d = self._dialect
        first = objects[0]
        test, values = d.among("object_id", [o.object_id for o in objects])
        have = {str(r[0]) for r in self._rows(
            f"SELECT object_id FROM context_objects WHERE user_id = {d.mark} "
            f"AND session_id = {d.mark} AND {test}", (first.user_id, first.session_id, *values))}
        new = [o for o in dict((o.object_id, o) for o in objects).values()
               if o.object_id not in have]
        marks = ", ".join(["?"] * 26)
        self._write_many(
            d.sql(f"{d.ignore_prefix} context_objects ({OBJECT_COLUMNS}) "
                  f"VALUES ({marks}){d.ignore_suffix}"),
            [(*_object_params(o, d.bool_columns), o.detailed, o.tokens_l1, o.summarized_by,
              json.dumps(o.losses, sort_keys=True), json.dumps(list(o.entities)))
             for o in new])
        return len(new)

    def context_objects(self, user_id: str, session_id: str) -> list[ContextObject]:
        rows = self._rows(self._sql(
            f"SELECT {OBJECT_COLUMNS} FROM context_objects WHERE user_id = ? "
            "AND session_id = ? ORDER BY created_at, turn_start, object_id"),
            (user_id, session_id))
        return [ContextObject(
            object_id=str(r[0]), user_id=str(r[1]), session_id=str(r[2]),
            content_hash=str(r[3]), object_type=str(r[4]), source_tool=r[5],
            source_key=r[6], tool_call_id=r[7], turn_start=int(r[8]), turn_end=int(r[9]),
            content=str(r[10]), compact=str(r[11]), stub=str(r[12]), tokens_l0=int(r[13]),
            tokens_l2=int(r[14]), tokens_l3=int(r[15]), fidelity=int(r[16]),
            pinned=bool(r[17]), superseded_by=r[18], created_at=float(r[19]),
            updated_at=float(r[20]), detailed=str(r[21]), tokens_l1=int(r[22]),
            summarized_by=str(r[23]), losses=json.loads(r[24]) if r[24] else {},
            entities=tuple(json.loads(r[25]) if r[25] else ()))
            for r in rows]

    def set_object_summaries(self, user_id: str, session_id: str, object_id: str,
                             summaries: ObjectSummaries, now: float) -> bool:
        return self._write(self._sql(
            "UPDATE context_objects SET detailed = ?, tokens_l1 = ?, compact = ?, "
            "tokens_l2 = ?, summarized_by = ?, losses = ?, updated_at = ? "
            "WHERE user_id = ? AND session_id = ? AND object_id = ? AND fidelity = 0"),
            (summaries.detailed, summaries.tokens_l1, summaries.compact, summaries.tokens_l2,
             summaries.summarized_by, json.dumps(summaries.losses, sort_keys=True), now, user_id,
             session_id, object_id)) > 0

    def apply_transitions(self, user_id: str, session_id: str,
                          transitions: Sequence[FidelityTransition],
                          superseded: Mapping[str, str], now: float) -> None:
        if superseded:
            self._write_many(self._sql(
                "UPDATE context_objects SET superseded_by = ?, updated_at = ? "
                "WHERE user_id = ? AND session_id = ? AND object_id = ?"),
                [(by, now, user_id, session_id, old) for old, by in superseded.items()])
        if not transitions:
            return
        self._write_many(self._sql(
            "UPDATE context_objects SET fidelity = ?, updated_at = ? "
            "WHERE user_id = ? AND session_id = ? AND object_id = ?"),
            [(t.to_fidelity, now, user_id, session_id, t.object_id) for t in transitions])
        self._write_many(self._sql(
            f"INSERT INTO fidelity_transitions (user_id, transition_id, session_id, "
            f"{TRANSITION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            [(user_id, _ordered_id(now, i), session_id, t.object_id, t.from_fidelity,
              t.to_fidelity, t.trigger, t.zone, t.tokens, t.call_id, t.created_at or now)
             for i, t in enumerate(transitions)])

    def fidelity_transitions(self, user_id: str, session_id: str) -> list[FidelityTransition]:
        rows = self._rows(self._sql(
            f"SELECT {TRANSITION_COLUMNS} FROM fidelity_transitions WHERE user_id = ? "
            "AND session_id = ? ORDER BY transition_id"), (user_id, session_id))
        return [FidelityTransition(
            object_id=str(r[0]), from_fidelity=int(r[1]), to_fidelity=int(r[2]),
            trigger=str(r[3]), zone=str(r[4]), tokens=int(r[5]), call_id=r[6],
            created_at=float(r[7])) for r in rows]


def _ordered_id(now: float, i: int) -> str:
    """A transition's id, which sorts as the transitions happened: several happen in
    one call, at one ``now``."""
    return f"{round(now * 1e6):017d}-{i:06d}-{uuid.uuid4().hex[:8]}"


def _object_params(o: ContextObject, bool_columns: bool) -> tuple[Any, ...]:
    return (o.object_id, o.user_id, o.session_id, o.content_hash, o.object_type,
            o.source_tool, o.source_key, o.tool_call_id, o.turn_start, o.turn_end,
            o.content, o.compact, o.stub, o.tokens_l0, o.tokens_l2, o.tokens_l3, o.fidelity,
            o.pinned if bool_columns else int(o.pinned), o.superseded_by, o.created_at,
            o.updated_at)
