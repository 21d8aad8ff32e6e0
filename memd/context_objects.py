"""The records of context virtualization (memd.engine.virtual): the objects a long
session's tool results are held as, their helper-made summaries, the fidelity transitions
pressure makes, and the faults the model asked for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ContextObject:
    """A piece of a long session's context held as an object of context virtualization
    (memd.engine.virtual): a tool result the client sent, with its full text (L0), the
    texts memd made of it at lower fidelities, its size at each, and the fidelity it is
    held at. ``object_id`` is derived from the session, the tool call and the content
    hash, so a resent history brings back the same object."""

    object_id: str
    user_id: str
    session_id: str
    content_hash: str
    object_type: str  # tool_result, file_context, error_context, ... (seed types)
    source_tool: str | None  # the tool that produced it (read, bash, ...)
    source_key: str | None  # what it is of: a read's path, a run's command
    tool_call_id: str | None
    turn_start: int  # the user turns (counted from 1) it came in
    turn_end: int
    content: str  # L0, exactly as the client sent it
    compact: str  # L2, about 5 %: an extractive excerpt or the helper's (its text says)
    stub: str  # L3, one line that names the object and how to get it back
    tokens_l0: int
    tokens_l2: int
    tokens_l3: int
    fidelity: int = 0  # 0 full, 1 detailed, 2 compact, 3 stub, 4 evicted
    pinned: bool = False
    superseded_by: str | None = None  # a later object of the same source_key
    created_at: float = 0.0
    updated_at: float = 0.0
    detailed: str = ""  # L1, about 30 %: an extractive excerpt or the helper's
    tokens_l1: int = 0
    summarized_by: str = "extractive"  # who made L1 and L2: memd's excerpts, or a helper
    # per lower fidelity ("detailed", "compact"): {"dropped": [...], "answers": [...]}
    losses: dict[str, Any] = field(default_factory=dict)
    entities: tuple[str, ...] = ()  # the identifiers it names most (paths, names, codes)


@dataclass(frozen=True, slots=True)
class ObjectSummaries:
    """A context object's detailed (L1) and compact (L2) texts as a helper model made
    them, with their token counts, the helper's name and the declared losses (see
    :class:`ContextObject`)."""

    detailed: str
    tokens_l1: int
    compact: str
    tokens_l2: int
    summarized_by: str
    losses: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FidelityTransition:
    """One change of a context object's fidelity: why (``trigger``: pressure,
    supersede), the pressure zone and the request's tokens when it happened, and the
    call it happened in."""

    object_id: str
    from_fidelity: int
    to_fidelity: int
    trigger: str
    zone: str
    tokens: int
    call_id: str | None = None
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault served under context virtualization: the model asked memd for what
    degraded objects held (``kind`` "query": a question answered from them; "restore":
    one object brought back whole), the answer, the objects it came from, the tokens the
    answer saved against restoring those objects whole, how long serving it took, and
    the session's turn (a restore stays pinned for some turns after it)."""

    fault_id: str
    session_id: str
    kind: str
    question: str
    answer: str
    object_ids: tuple[str, ...]
    tokens_avoided: int
    latency_ms: int
    turn: int
    call_id: str | None = None
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """The fidelity an object first entered a request at under pressure
    (memd.engine.virtual.admission), its score, the score's parts, and the call that
    decided it."""

    object_id: str
    session_id: str
    fidelity: int
    score: float
    parts: dict[str, float]
    call_id: str | None = None
    created_at: float = 0.0


PASSAGE_LINES = 12  # a passage: this many lines of an object, overlapping by half


def object_passages(text: str) -> list[str]:
    """An object's passages for a micro-fault: ``PASSAGE_LINES`` lines each, overlapping
    by half (erasure finds their embeddings by them)."""
    lines = text.splitlines() or [text]
    step = PASSAGE_LINES // 2
    return ["\n".join(lines[i:i + PASSAGE_LINES])
            for i in range(0, max(1, len(lines) - step), step)]
