"""Faults: the model asks memd for what a held object lost.

While virtualization is engaged, memd adds two tools to the forwarded request.
``memory_query(question)`` is a micro-fault: a hybrid search (embedding and keyword) over
the passages of every object of the session, evicted ones included, answered with the
most relevant passages of the best objects, verbatim; a helper model's answer may stand
in for them (:data:`Answerer`). ``memory_restore(object_id)`` is a full fault: the
object's whole text, held whole (and pinned) for the next turns, with the objects of the
same source when they fit. The proxy serves each call and asks the model again with the
call and its result appended; none of it is stored as a message. Each fault served is
recorded (``fault_history``) with the tokens its answer saved against restoring its
objects whole.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memd.context_objects import ContextObject, Fault, FidelityTransition, object_passages
from memd.engine.virtual.fidelity import FULL, NAMES
from memd.models.tokens import count_text

if TYPE_CHECKING:
    from memd.backends.roles import ContextObjectStore
    from memd.models.embedder import Embedder

QUERY, RESTORE = "memory_query", "memory_restore"
NAMES_OF_TOOLS = frozenset({QUERY, RESTORE})
TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {
        "name": QUERY,
        "description": "Ask about earlier tool output that memd holds out of your context "
                       "(a [memd: ...] stub or excerpt, or a result no longer shown). "
                       "Answers with the relevant passages verbatim.",
        "parameters": {"type": "object", "properties": {"question": {
            "type": "string", "description": "What you need to know, with the names, "
                                             "paths or errors it concerns"}},
            "required": ["question"]}}},
    {"type": "function", "function": {
        "name": RESTORE,
        "description": "Bring back the whole text of an object memd holds out of your "
                       "context, by the object id its stub or excerpt names.",
        "parameters": {"type": "object", "properties": {"object_id": {
            "type": "string", "description": "The id, e.g. obj-1a2b3c4d5e6f"}},
            "required": ["object_id"]}}},
)

TOP_OBJECTS = 3
ANSWER_TOKENS = 1200  # what a micro-fault's answer may take
RESTORE_TOKENS = 6000  # what a restore's related objects may add to it
_WORD = re.compile(r"[A-Za-z0-9_./:-]{2,}")

# A helper model's answer from the question and the passages found (None: no answer,
# the passages go verbatim). Left to a helper that runs one.
Answerer = Callable[[str, Sequence[tuple[ContextObject, str]]], str | None]


@dataclass(frozen=True, slots=True)
class Hit:
    """An object found for a question, its best passage, and their score."""

    object: ContextObject
    passage: str
    score: float


def with_tools(tools: Any) -> list[Any]:
    """The request's tools with memd's two appended (a client's own of the same names
    are its own: memd's are not added then)."""
    own = list(tools) if isinstance(tools, list) else []
    named = {(t.get("function") or {}).get("name") for t in own if isinstance(t, Mapping)}
    if named & NAMES_OF_TOOLS:
        return own
    return [*own, *TOOLS]


def split_calls(calls: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]],
                                                             list[Mapping[str, Any]]]:
    """A reply's tool calls: (memd's, the client's)."""
    ours: list[Mapping[str, Any]] = []
    theirs: list[Mapping[str, Any]] = []
    for c in calls:
        name = (c.get("function") or {}).get("name")
        (ours if name in NAMES_OF_TOOLS else theirs).append(c)
    return ours, theirs


def search(objects: Sequence[ContextObject], question: str, embedder: Embedder,
           top: int = TOP_OBJECTS) -> list[Hit]:
    """The ``top`` objects for ``question``, best first: each passage scores half by
    its embedding's cosine to the question's, half by the share of the question's words
    it holds, each weighted by its rarity among the passages (identifiers count whole);
    an object scores its best passage."""
    passages = [(o, p) for o in objects for p in object_passages(o.content)]
    if not passages or not question.strip():
        return []
    vectors = embedder.embed([question, *(p for _, p in passages)])
    q, rest = vectors[0], vectors[1:]
    norms = np.linalg.norm(rest, axis=1) * (np.linalg.norm(q) or 1.0)
    cosine = rest @ q / np.where(norms == 0, 1.0, norms)
    words = set(_words(question))
    held = [set(_words(p)) for _, p in passages]
    # a word's weight is its rarity among the passages: an identifier named in one
    # output outweighs the question's "what" and "does"
    weight = {w: math.log((1 + len(held)) / (1 + sum(1 for h in held if w in h)))
              for w in words}
    total = sum(weight.values()) or 1.0
    best: dict[str, Hit] = {}
    for (o, p), has, cos in zip(passages, held, cosine, strict=True):
        overlap = sum(weight[w] for w in words & has) / total
        score = 0.5 * float(cos) + 0.5 * overlap
        if o.object_id not in best or score > best[o.object_id].score:
            best[o.object_id] = Hit(o, p, score)
    return sorted(best.values(), key=lambda h: -h.score)[:top]


def _words(text: str) -> list[str]:
    return [w.lower().strip(".:") for w in _WORD.findall(text)]


@dataclass(frozen=True, slots=True)
class Served:
    """A memory tool call served: the tool message's content, and the fault recorded."""

    content: str
    fault: Fault


class FaultHost(Protocol):
    """What serving a fault uses: the session's objects and the fault log (the store),
    the embedder a micro-fault searches with, and the clock. The engine is one; the
    server passes it."""

    @property
    def store(self) -> ContextObjectStore: ...

    @property
    def embedder(self) -> Embedder: ...

    def now(self) -> float: ...


def serve(engine: FaultHost, user_id: str, session_id: str, turn: int, call_id: str,
          tool_call: Mapping[str, Any], answerer: Answerer | None = None) -> Served:
    """Serve one of memd's tool calls and record it (see the module docstring). A call
    with bad arguments gets an answer that says so, as a tool would."""
    started = time.monotonic()
    fn = tool_call.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except json.JSONDecodeError:
        args = None
    objects = engine.store.context_objects(user_id, session_id)
    used: list[ContextObject]
    if fn.get("name") == QUERY:
        question = args.get("question") if isinstance(args, dict) else None
        if not isinstance(question, str) or not question.strip():
            text, used, avoided = "memory_query needs a 'question' string.", [], 0
            question = str(fn.get("arguments") or "")
        else:
            text, used, avoided = _query(engine.embedder, objects, question, answerer, None)
        kind = "query"
    else:
        question = args.get("object_id") if isinstance(args, dict) else None
        if not isinstance(question, str):
            question = str(fn.get("arguments") or "")
        text, used = _restore(engine.store, engine.now(), user_id, session_id, objects,
                              question, call_id)
        avoided, kind = 0, "restore"
    fault = Fault(f"{round(engine.now() * 1e6):017d}-{uuid.uuid4().hex[:8]}", session_id,
                  kind, question, text, tuple(o.object_id for o in used), avoided,
                  int((time.monotonic() - started) * 1000), turn, call_id, engine.now())
    engine.store.add_fault(user_id, fault)
    return Served(text, fault)


def _query(embedder: Embedder, objects: Sequence[ContextObject], question: str,
           answerer: Answerer | None, model: str | None,
           ) -> tuple[str, list[ContextObject], int]:
    hits = search(objects, question, embedder)
    if not hits:
        return "memd holds no earlier tool output for this session.", [], 0
    found = [(h.object, h.passage) for h in hits]
    answer = answerer(question, found) if answerer is not None else None
    if answer is None:
        parts: list[str] = []
        used = 0
        for o, passage in found:
            part = (f"[object {o.object_id}: output of {o.source_tool or 'a tool'}"
                    f"{' ' + o.source_key if o.source_key else ''}, held "
                    f"{NAMES[o.fidelity]}; an excerpt, verbatim]\n{passage}")
            cost = count_text(part, model)
            if parts and used + cost > ANSWER_TOKENS:
                break
            parts.append(part)
            used += cost
        answer = "\n\n".join(parts)
    whole = sum(o.tokens_l0 for o, _ in found)
    return answer, [o for o, _ in found], max(0, whole - count_text(answer, model))


def _restore(store: ContextObjectStore, now: float, user_id: str, session_id: str,
             objects: Sequence[ContextObject], object_id: str, call_id: str,
             ) -> tuple[str, list[ContextObject]]:
    by_id = {o.object_id: o for o in objects}
    target = by_id.get(object_id.strip())
    if target is None:
        return (f"memd holds no object {object_id!r} in this session; the ids are in "
                "the [memd: ...] stubs and excerpts.", [])
    restored = [target, *_related(target, objects)]
    budget = RESTORE_TOKENS
    back: list[ContextObject] = [target]
    for o in restored[1:]:
        if o.tokens_l0 <= budget:
            back.append(o)
            budget -= o.tokens_l0
    store.apply_transitions(user_id, session_id, [
        FidelityTransition(o.object_id, o.fidelity, FULL, "fault", "-", o.tokens_l0,
                           call_id, now)
        for o in back if o.fidelity != FULL], {}, now)
    text = "\n\n".join(
        f"[memd: object {o.object_id}, the output of {o.source_tool or 'a tool'}"
        f"{' ' + o.source_key if o.source_key else ''}, whole"
        f"{'' if o is target else ' (related)'}]\n{o.content}" for o in back)
    return text, back


def _related(target: ContextObject, objects: Sequence[ContextObject],
             ) -> list[ContextObject]:
    """The objects within two hops of ``target``: one of the same source, or one that
    supersedes it or that it supersedes, and theirs in turn; newest first."""
    def near(o: ContextObject) -> set[str]:
        return {p.object_id for p in objects if p.object_id != o.object_id and (
            (o.source_key is not None and p.source_key == o.source_key)
            or p.superseded_by == o.object_id or o.superseded_by == p.object_id)}

    by_id = {o.object_id: o for o in objects}
    one = near(target)
    two = set().union(*(near(by_id[i]) for i in one)) if one else set()
    ids = (one | two) - {target.object_id}
    return sorted((by_id[i] for i in ids), key=lambda o: -o.created_at)


def pinned(store: ContextObjectStore, turns: int, user_id: str, session_id: str,
           turn: int) -> frozenset[str]:
    """The objects a restore keeps whole at this turn of the session (for ``turns``
    turns after it)."""
    return frozenset(i for f in store.faults(user_id, session_id)
                     if f.kind == "restore" and turn - f.turn < turns for i in f.object_ids)
