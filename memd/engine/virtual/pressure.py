"""Pressure: which zone a request is in, and which objects degrade, in what order.

Zones are fractions of the model's window (memd.config.VirtualZones) that the request
and its response reserve fill: normal, caution, warning, critical, emergency. Past the
``degrade`` line (by default the critical one: between it and the caution line,
where virtualization engages, nothing changes, so that steps are rare) the oldest tool
results degrade first: a result superseded by a later one of
the same source goes straight to a stub; then, oldest first, full results become
detailed summaries (about 30 %), then compact ones (about 5 %), and if that is not
enough, compact ones become stubs, and stubs are
evicted: the tool call and its result leave the request together (each still costs its
call's arguments and a stub, and a long session has hundreds). Degrading goes on
until the request is under the target, well under the line, so that it happens in large
steps and rarely: each step changes the prompt from the first degraded object on, and the
model server re-reads everything after it. Evicting goes further, down to
``evict_target``: the oldest stubs sit near the start of the prompt, so each eviction
makes the model server re-read nearly all of it. What degraded stays degraded on later calls
(the caller starts from the fidelities held before), so consecutive requests share their
prefix. The newest results, up to ``keep_recent`` of the window (and the newest one
whatever its size), stay whole unless the request would not fit the window otherwise,
degrading only as far as the request needs to fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memd.config import VirtualZones
from memd.engine.block.inject import MARGIN_MIN, MARGIN_SHARE
from memd.engine.virtual.fidelity import COMPACT, DETAILED, EVICTED, FULL, STUB

ZONES = ("normal", "caution", "warning", "critical", "emergency")
# a step to a lower fidelity is taken only when it saves at least this share of the
# object's tokens (an excerpt of a short output would save next to nothing)
MIN_SAVING = 0.5


def zone(tokens: int, window: int, zones: VirtualZones) -> str:
    """The zone of a request of ``tokens`` (with its response reserve) in ``window``."""
    share = tokens / window if window > 0 else 1.0
    lines = (zones.caution, zones.warning, zones.critical, zones.emergency)
    return ZONES[sum(1 for line in lines if share > line)]


def fit_line(window: int) -> int:
    """What a request may fill of the window: all of it but the safety margin memd
    keeps for the chat template and counting error (memd.engine.block.inject)."""
    return window - max(MARGIN_MIN, int(window * MARGIN_SHARE))


@dataclass(slots=True)
class Held:
    """An object of this call: its content's tokens at each fidelity, what its exchange
    costs besides (``frame``: the tool message's overhead and its call in the assistant
    message; None: it cannot be evicted, its call was not found), the fidelity it is
    held at, and whether it is pinned or superseded."""

    object_id: str
    sizes: dict[int, int]
    frame: int | None = None
    fidelity: int = FULL
    pinned: bool = False
    superseded: bool = False

    def cost(self, fidelity: int) -> int:
        """What the exchange costs in the request with the object at ``fidelity``."""
        return 0 if fidelity == EVICTED else self.sizes[fidelity] + (self.frame or 0)

    def saving(self, to: int) -> int:
        return self.cost(self.fidelity) - self.cost(to)


@dataclass(frozen=True, slots=True)
class Step:
    object_id: str
    from_fidelity: int
    to_fidelity: int
    trigger: str  # "supersede" or "pressure"


def plan(held: Sequence[Held], tokens: int, window: int, zones: VirtualZones,
         ) -> tuple[list[Step], int]:
    """The steps that bring a request of ``tokens`` under the target (see the module
    docstring), oldest object first, and the request's tokens after them. ``held`` is
    in the history's order; each one's ``fidelity`` is updated."""
    steps: list[Step] = []
    if tokens <= min(zones.degrade * window, fit_line(window)):
        return steps, tokens
    target = zones.target * window
    total = tokens

    def degrade(h: Held, to: int, trigger: str) -> None:
        nonlocal total
        total -= h.saving(to)
        steps.append(Step(h.object_id, h.fidelity, to, trigger))
        h.fidelity = to

    def worth(h: Held, to: int) -> bool:
        if h.pinned or h.fidelity >= to or (to != EVICTED and to not in h.sizes):
            return False
        if to == EVICTED:
            return h.frame is not None
        return h.saving(to) >= MIN_SAVING * h.sizes[h.fidelity]

    recent = _recent(held, int(zones.keep_recent * window))
    older = [h for h in held if h.object_id not in recent]
    for h in older:
        if total <= target:
            break
        if h.superseded and worth(h, STUB):
            degrade(h, STUB, "supersede")
    for group, line in ((older, target), ([h for h in held if h.object_id in recent],
                                          fit_line(window))):
        for to in (DETAILED, COMPACT, STUB, EVICTED):
            # evicting, once stubs are not enough, goes on to the lower line
            stop = (zones.evict_target * window
                    if to == EVICTED and group is older and total > line else line)
            for h in group:
                if total <= stop:
                    break
                if worth(h, to):
                    degrade(h, to, "pressure")
    return steps, total


def _recent(held: Sequence[Held], keep: int) -> set[str]:
    """The newest objects whose tokens, as held, add up to at most ``keep``, and the
    newest one whatever its size: it is what the model just asked for."""
    out: set[str] = set()
    used = 0
    for h in reversed(held):
        used += h.cost(h.fidelity)
        if used > keep and out:
            break
        out.add(h.object_id)
    return out
