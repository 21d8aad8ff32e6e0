"""One call's virtualization: segment the history, store the new objects, degrade under
pressure, record every transition, and rewrite the request.

The rewritten request stays valid for the API: a degraded tool result is the same
message (role, ``tool_call_id``, name) with its content replaced by the text of its
fidelity, so no tool message loses its call and no call its result. An evicted one leaves
with its call: the call goes from its assistant message, and an assistant message left
with no call and no text goes too. The system prompt and the user's messages are the
client's own objects, unchanged, and so is every other message.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memd.config import VirtualZones
from memd.context_objects import AdmissionDecision, ContextObject, FidelityTransition
from memd.engine.virtual.admission import Admission, admit, task_terms
from memd.engine.virtual.fidelity import (
    COMPACT,
    DETAILED,
    EVICTED,
    FULL,
    NAMES,
    STUB,
    Reading,
    extractive,
    extractive_losses,
    key_entities,
    loss_of,
    stub,
)
from memd.engine.virtual.pressure import Held, Step, fit_line, plan, zone
from memd.engine.virtual.segment import Segment, segment, text_of, tool_calls
from memd.models.tokens import MESSAGE_OVERHEAD, count_text

if TYPE_CHECKING:
    from memd.backends.base import Store


@dataclass(frozen=True, slots=True)
class Budget:
    """What a call's request is measured against, in memd's token counts: the model's
    window and the response reserve (both divided by the factor from memd's counts to
    the model's), and the request's own tokens (messages and tool definitions)."""

    window: int
    reserve: int
    request: int

    @classmethod
    def of(cls, window: int, reserve: int, request: int, token_scale: float) -> Budget:
        return cls(math.floor(window / token_scale), math.ceil(reserve / token_scale),
                   request)


@dataclass(frozen=True, slots=True)
class Virtualized:
    """The request as it goes upstream, its tokens (messages and tools, memd's counts),
    the call report's ``virtual`` section, and where each of its messages was in the
    client's request (evicted exchanges are not there)."""

    messages: list[dict[str, Any]]
    tokens: int
    report: dict[str, Any]
    kept: list[int]  # the index in the client's messages of each message in ``messages``
    new: list[ContextObject] = field(default_factory=list)  # the objects first seen
    # the objects a later one of the same source superseded in this call, by that one
    superseded: dict[str, str] = field(default_factory=dict)


def engages(mode: str, budget: Budget, zones: VirtualZones) -> bool:
    """Whether a call in ``mode`` is virtualized: "on" always, "auto" when the request
    and its reserve pass the caution line."""
    if mode == "on":
        return True
    return mode == "auto" and budget.request + budget.reserve > zones.caution * budget.window


def virtualize(store: Store, user_id: str, session_id: str,
               messages: Sequence[Mapping[str, Any]], budget: Budget, zones: VirtualZones,
               *, mode: str, model: str | None, call_id: str, now: float,
               pinned: frozenset[str] = frozenset(), restorable: bool = False,
               ) -> Virtualized:
    """The call's request with its tool results at the fidelities pressure leaves them
    (see the package docstring); ``pinned`` objects (restored by a fault) stay whole."""
    calls = tool_calls(messages)
    segments = segment(session_id, messages, calls)
    with store.transaction():
        stored = {o.object_id: o for o in store.context_objects(user_id, session_id)}
        new = [_new_object(user_id, session_id, s, model, now) for s in segments
               if s.object_id not in stored]
        store.add_context_objects(new)
        objects = {**stored, **{o.object_id: o for o in new}}
        superseded = _superseded(segments, objects)
        held = [_held(s, objects[s.object_id], _frame(s, calls, model),
                      s.object_id in superseded, s.object_id in pinned) for s in segments]
        before = budget.request + budget.reserve
        admitted = (_admit(messages, segments, held, objects, {o.object_id for o in new},
                           budget.window, restorable)
                    if before > zones.caution * budget.window else {})
        tokens = before - sum(h.cost(FULL) - h.cost(h.fidelity) for h in held)
        steps, after = plan(held, tokens, budget.window, zones)
        steps[:0] = [Step(oid, FULL, a.fidelity, "admission")
                     for oid, a in admitted.items() if a.fidelity != FULL]
        zone_before, zone_after = (zone(before, budget.window, zones),
                                   zone(after, budget.window, zones))
        transitions = [FidelityTransition(st.object_id, st.from_fidelity, st.to_fidelity,
                                          st.trigger, zone_before, before, call_id, now)
                       for st in steps]
        store.apply_transitions(user_id, session_id, transitions, superseded, now)
        store.add_admissions(user_id, [
            AdmissionDecision(oid, session_id, a.fidelity, a.score, dict(a.parts), call_id,
                              now) for oid, a in admitted.items()])
    out, kept = _rewrite(messages, segments, held, objects, calls)
    report = {
        "mode": mode, "engaged": True, "window": budget.window, "reserve": budget.reserve,
        "zone": zone_before, "zone_after": zone_after,
        "tokens": {"request": before, "forwarded": after, "saved": before - after},
        "fits": after <= fit_line(budget.window),
        "objects": {"total": len(held), "new": len(new),
                    **{NAMES[f]: sum(1 for h in held if h.fidelity == f)
                       for f in (FULL, DETAILED, COMPACT, STUB, EVICTED)}},
        "admitted": [{"object_id": oid, "fidelity": NAMES[a.fidelity], "score": a.score,
                      **a.parts} for oid, a in admitted.items()],
        "held": [_held_report(objects[h.object_id], h) for h in held if h.fidelity != FULL],
        "transitions": [{"object_id": t.object_id, "from": NAMES[t.from_fidelity],
                         "to": NAMES[t.to_fidelity], "trigger": t.trigger}
                        for t in transitions],
    }
    return Virtualized(out, after - budget.reserve, report, kept, new, superseded)


def _admit(messages: Sequence[Mapping[str, Any]], segments: Sequence[Segment],
           held: Sequence[Held], objects: Mapping[str, ContextObject], new: set[str],
           window: int, restorable: bool) -> dict[str, Admission]:
    """The admission of each object first seen in this call (memd.engine.virtual.
    admission); each one's ``held`` fidelity is set to it."""
    task = next((text_of(m.get("content")) for m in reversed(messages)
                 if m.get("role") == "user"), None)
    terms = task_terms(task or "")
    last = max((i for i, m in enumerate(messages) if m.get("role") != "tool"), default=-1)
    out: dict[str, Admission] = {}
    after = 0
    for s, h in zip(reversed(segments), reversed(held), strict=True):
        o = objects[s.object_id]
        if s.object_id in new and not h.pinned:
            # an older read of a source the history reads again comes in as its stub
            a = (Admission(STUB, 0.0, {"superseded": 1.0}) if h.superseded else
                 admit(s.object_type, o.content, h.sizes, window, after, s.index > last,
                       terms, restorable))
            out[s.object_id] = a
            h.fidelity = a.fidelity
        after += o.tokens_l0
    return dict(reversed(out.items()))


def _new_object(user_id: str, session_id: str, s: Segment, model: str | None,
                now: float) -> ContextObject:
    tokens = count_text(s.text, model)
    reading = Reading(s.text)  # read once for the excerpts and the entities
    lines = len(reading.lines)
    compact = extractive(s.object_id, s.source_tool, s.source_key, reading, tokens,
                         lambda t: count_text(t, model))
    detailed = extractive(s.object_id, s.source_tool, s.source_key, reading, tokens,
                          lambda t: count_text(t, model), DETAILED)
    entities = key_entities(reading, s.source_key)
    short = stub(s.object_id, s.source_tool, s.source_key, lines, tokens, entities)
    return ContextObject(
        object_id=s.object_id, user_id=user_id, session_id=session_id,
        content_hash=s.content_hash, object_type=s.object_type, source_tool=s.source_tool,
        source_key=s.source_key, tool_call_id=s.tool_call_id, turn_start=s.turn,
        turn_end=s.turn, content=s.text, compact=compact, stub=short, tokens_l0=tokens,
        tokens_l2=count_text(compact, model), tokens_l3=count_text(short, model),
        created_at=now, updated_at=now, detailed=detailed,
        tokens_l1=count_text(detailed, model), losses=extractive_losses(), entities=entities)


def _superseded(segments: Sequence[Segment], objects: Mapping[str, ContextObject],
                ) -> dict[str, str]:
    """Objects a later one of the same source supersedes, and by which, where the
    store does not say so yet."""
    newest: dict[tuple[str | None, str], str] = {}
    for s in segments:
        if s.source_key is not None:
            newest[(s.source_tool, s.source_key)] = s.object_id
    out: dict[str, str] = {}
    for s in segments:
        later = newest.get((s.source_tool, s.source_key or ""))
        if s.source_key is not None and later is not None and later != s.object_id \
                and objects[s.object_id].superseded_by != later:
            out[s.object_id] = later
    return out


def _held(s: Segment, o: ContextObject, frame: int | None, superseded: bool,
          pinned: bool = False) -> Held:
    """``o`` in this call, at the fidelity held before (an object evicted before whose
    call the client no longer sends is held as a stub: it cannot leave alone)."""
    fidelity = STUB if o.fidelity == EVICTED and frame is None else o.fidelity
    return Held(s.object_id, _sizes(o), frame, fidelity, o.pinned or pinned,
                superseded or o.superseded_by is not None)


def _frame(s: Segment, calls: Mapping[str, tuple[int, Mapping[str, Any]]],
           model: str | None) -> int | None:
    """What the exchange of ``s`` costs besides its content (its message's overhead and
    id, its call in the assistant message), or None when its call is not in the
    history: then it cannot be evicted."""
    if s.tool_call_id is None or s.tool_call_id not in calls:
        return None
    call = calls[s.tool_call_id][1]
    fn = call.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    kind, name, arguments = call.get("type"), fn.get("name"), fn.get("arguments")
    if isinstance(arguments, str) and isinstance(kind, str) and isinstance(name, str) \
            and call.get("id") == s.tool_call_id and set(call) == {"id", "type", "function"} \
            and set(fn) == {"name", "arguments"}:  # the usual shape: its cost is kept
        return _frame_of(s.tool_call_id, kind, name, arguments, model)
    return _frame_tokens(s.tool_call_id, json.dumps(call, sort_keys=True), model)


@functools.lru_cache(maxsize=8192)
def _frame_of(tool_call_id: str, kind: str, name: str, arguments: str,
              model: str | None) -> int:
    """:func:`_frame` of a call of the usual shape, kept: every call of a session resends
    every earlier exchange, and counting them all again would cost each call more as the
    session grows."""
    call = {"id": tool_call_id, "type": kind, "function": {"name": name,
                                                           "arguments": arguments}}
    return _frame_tokens(tool_call_id, json.dumps(call, sort_keys=True), model)


def _frame_tokens(tool_call_id: str, call_json: str, model: str | None) -> int:
    return MESSAGE_OVERHEAD + count_text(tool_call_id, model) + count_text(call_json, model)


def _rewrite(messages: Sequence[Mapping[str, Any]], segments: Sequence[Segment],
             held: Sequence[Held], objects: Mapping[str, ContextObject],
             calls: Mapping[str, tuple[int, Mapping[str, Any]]],
             ) -> tuple[list[dict[str, Any]], list[int]]:
    """The messages with each object at its fidelity (see the module docstring), and
    the index in ``messages`` of each one kept."""
    out: list[dict[str, Any] | None] = list(messages)  # type: ignore[arg-type]
    evicted: dict[int, set[str]] = {}
    for s, h in zip(segments, held, strict=True):
        if h.fidelity == EVICTED and s.tool_call_id is not None:
            out[s.index] = None
            evicted.setdefault(calls[s.tool_call_id][0], set()).add(s.tool_call_id)
        elif h.fidelity != FULL:
            out[s.index] = {**messages[s.index],
                            "content": _text(objects[s.object_id], h.fidelity)}
    for i, ids in evicted.items():
        m = messages[i]
        left = [c for c in m.get("tool_calls") or () if c.get("id") not in ids]
        if left:
            out[i] = {**m, "tool_calls": left}
        elif m.get("content"):
            out[i] = {k: v for k, v in m.items() if k != "tool_calls"}
        else:
            out[i] = None
    kept = [i for i, m in enumerate(out) if m is not None]
    return [m for m in out if m is not None], kept


def _sizes(o: ContextObject) -> dict[int, int]:
    sizes = {FULL: o.tokens_l0, COMPACT: o.tokens_l2, STUB: o.tokens_l3}
    if o.detailed:  # an object stored before memd made detailed texts has none
        sizes[DETAILED] = o.tokens_l1
    return sizes


def _text(o: ContextObject, fidelity: int) -> str:
    return {FULL: o.content, DETAILED: o.detailed, COMPACT: o.compact,
            STUB: o.stub}[fidelity]


def _held_report(o: ContextObject, h: Held) -> dict[str, Any]:
    return {"object_id": o.object_id, "type": o.object_type, "tool": o.source_tool,
            "key": o.source_key, "fidelity": NAMES[h.fidelity], "tokens": h.cost(h.fidelity),
            "tokens_full": o.tokens_l0, "loss": loss_of(o.losses, h.fidelity),
            "by": o.summarized_by if h.fidelity in (DETAILED, COMPACT) else None,
            "superseded_by": o.superseded_by, "entities": list(o.entities)}
