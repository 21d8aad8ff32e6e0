"""Admission: the fidelity a tool result first enters the request at.

A result is held whole when it first comes, and later degraded under pressure; but each
degrading step changes the prompt from the first object it touches, and the model server
re-reads everything after it. In a small window every big result held whole brings the
next step closer: a session whose calls each add a few thousand tokens of output would
degrade every few calls, and each step would cost most of the cached prefix. Admitting a
result that is big and of little use to the task at a lower fidelity from the start
(its bytes never change after that, until a large step) lets many calls pass between
steps. An admitted excerpt is flagged and names its object, so the model can fault the
whole text back (``memory_restore``) when it needs it.

The score weighs four things, each in [0, 1]:

- ``type``: what kind of output it is (an error report is read closely; a listing or a
  search result is skimmed);
- ``size``: how little of the window it takes (a result of a quarter of the window or
  more scores 0);
- ``recency``: how near the end of the request it is (the result the model just asked for
  scores 1; results first seen deep in a resent history, as when memd first engages on a
  long session, score near 0);
- ``relevance``: how many of the current task's terms (the words and identifiers of the
  newest user message) it holds.

A result is admitted whole while the request has room (under the caution line), and when
admitting it lower would save little. The result the model just asked for comes in
whole unless it is big (more than 6 % of the window) and the call offers
``memory_restore`` (the Chat Completions door), and never below the detailed excerpt: a
model that cannot fault it back sees what it asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from memd.engine.virtual.fidelity import COMPACT, DETAILED, FULL

TYPE_SCORES = {"error_context": 1.0, "file_context": 0.5, "design_decision": 1.0,
               "plan": 1.0, "debugging_session": 0.8}
OTHER_TYPE = 0.3
WEIGHTS = {"type": 0.2, "size": 0.3, "recency": 0.3, "relevance": 0.2}
SIZE_LINE = 0.25  # of the window: a result this big or bigger scores 0 on size
FULL_LINE = 0.80  # a score at or above this admits whole
DETAILED_LINE = 0.35  # at or above this, the detailed excerpt; below, the compact one
NEWEST_WHOLE = 0.06  # of the window: the newest result up to this size comes in whole
MIN_SAVING = 0.5  # admitting lower must save at least this share of the full text
TASK_TERMS = 3  # a result holding this many of the task's terms scores 1 on relevance

_TERM = re.compile(r"[A-Za-z_][\w./-]{3,}")


@dataclass(frozen=True, slots=True)
class Admission:
    """The fidelity an object is admitted at, its score and the score's parts."""

    fidelity: int
    score: float
    parts: Mapping[str, float]


def task_terms(text: str) -> frozenset[str]:
    """The words and identifiers of the task (lower case, four characters or more)."""
    return frozenset(t.lower().rstrip(".") for t in _TERM.findall(text))


def admit(object_type: str, text: str, sizes: Mapping[int, int], window: int,
          after: int, newest: bool, terms: frozenset[str],
          restorable: bool = False) -> Admission:
    """The admission of a result of ``object_type`` and ``text`` (its tokens at each
    fidelity in ``sizes``) that ``after`` tokens of the request follow, in ``window``;
    ``newest``: the result the model just asked for, admitted below full only when
    ``restorable`` (the call offers ``memory_restore``: the model can have it whole
    again). Call it only under pressure: a request with room admits everything whole."""
    full = sizes[FULL]
    lowered = text.lower()
    hits = sum(1 for t in terms if t in lowered)
    parts = {
        "type": TYPE_SCORES.get(object_type, OTHER_TYPE),
        "size": max(0.0, 1.0 - full / (SIZE_LINE * window)),
        "recency": 1.0 if newest else max(0.0, 1.0 - after / window),
        "relevance": min(1.0, hits / TASK_TERMS),
    }
    score = round(sum(WEIGHTS[k] * v for k, v in parts.items()), 4)
    fidelity = FULL
    small = full <= NEWEST_WHOLE * window
    if score < FULL_LINE and not (newest and (small or not restorable)):
        fidelity = COMPACT if score < DETAILED_LINE and not newest else DETAILED
    while fidelity != FULL and (fidelity not in sizes
                                or full - sizes[fidelity] < MIN_SAVING * full):
        fidelity = DETAILED if fidelity == COMPACT else FULL
    return Admission(fidelity, score, {k: round(v, 4) for k, v in parts.items()})
