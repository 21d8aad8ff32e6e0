"""Passages of a user message: what one vector for the whole message misses.

Users mention things in passing ("by the way, I just canceled my Forbes subscription")
inside a message about something else, and a message's one vector is about its main
subject: the sentence that answers a later question can sit at a cosine near zero with
it while the sentence alone is close. So the embedding job also embeds each passage of a
user message of more than one (a sentence, short ones joined to the next), and recall
judges a past message by the better of its own cosine and its closest passage's
(:func:`closest`), then shows that passage rather than the message's head.

The passage vectors live in the embedder's persistent cache, keyed by their text as every
vector there is: recall reads them for the messages its channels found without calling
the model, and erasing a message erases them with its other derived texts
(memd.engine.learning.erase).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from memd.engine.learning.templates import user_words
from memd.engine.validate import excerpt

if TYPE_CHECKING:
    from memd.models.embedder import CachedEmbedder

#: A sentence shorter than this ("Thanks!", "By the way,") is joined to the next one.
MIN_CHARS = 40
#: A passage is cut to this many characters (a long unpunctuated line, a pasted log).
MAX_CHARS = 400
#: Passages are taken from this excerpt of a message (its head and tail: a pasted file's
#: middle is not what the user said), and at most MAX_PASSAGES of them.
SPAN_CHARS = 4_000
MAX_PASSAGES = 24
_BREAK = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ASKING = re.compile(
    r"^(what|who|whom|whose|when|where|which|how|why|is|are|was|were|do|does|did|can|"
    r"could|would|should|will|shall|may|have|has|any|tell me|remind me)\b", re.IGNORECASE)


def passages(text: str) -> list[str]:
    """The passages of ``text`` that state something, in order (a question says nothing
    about the user), or none when it is one passage already. Only the user's words are
    cut into passages: the client's text around them (memd.engine.learning.templates) never
    becomes one."""
    return _cut(excerpt(text.strip(), SPAN_CHARS))


def _cut(span: str) -> list[str]:
    """:func:`passages` of the part of a text that is cut (``span``)."""
    out: list[str] = []
    pending = ""
    for part in _BREAK.split(user_words(span)):
        part = " ".join(part.split())
        if not part or part == "...":
            continue
        pending = f"{pending} {part}" if pending else part
        if len(pending) >= MIN_CHARS:
            out.append(pending[:MAX_CHARS])
            pending = ""
    if pending:
        if out and len(out[-1]) + len(pending) < MAX_CHARS:
            out[-1] = f"{out[-1]} {pending}"
        else:
            out.append(pending)
    if len(out) < 2:
        return []
    return [p for p in out if not only_asks(p)][:MAX_PASSAGES]


def only_asks(text: str) -> bool:
    """Whether a message only asks something: every sentence of it is a question."""
    sentences = [p for p in _SENTENCE_END.split(" ".join(text.split())) if p]
    return bool(sentences) and all(
        p.endswith("?") or not p.endswith((".", "!")) and bool(_ASKING.match(p))
        for p in sentences)


def _passages_of(text: str) -> tuple[str, ...]:
    """:func:`passages`, kept for the texts search meets again: a user's messages that
    rank near the top come back search after search (each compile's recall judges a
    dozen or more)."""
    return _cut_kept(excerpt(text.strip(), SPAN_CHARS))


@lru_cache(maxsize=2048)  # keyed by the span cut: SPAN_CHARS at most each
def _cut_kept(span: str) -> tuple[str, ...]:
    return tuple(_cut(span))


@dataclass(frozen=True, slots=True)
class Closest:
    """A message's passage closest to a query, and its cosine (-1.0 and "" when the
    message has no embedded passage)."""

    similarity: float
    text: str


NONE = Closest(-1.0, "")


def closest(embedder: CachedEmbedder, texts: Sequence[str], qvec: np.ndarray
            ) -> list[Closest]:
    """For each of ``texts``, its passage closest to the query vector ``qvec``, from the
    vectors the embedding job cached (one cache read for all; never the model)."""
    split = [_passages_of(t) for t in texts]
    flat = [p for ps in split for p in ps]
    vecs = iter(embedder.cached(flat))
    out = []
    for ps in split:
        best = NONE
        for p in ps:
            vec = next(vecs)
            if vec is not None and (sim := float(np.dot(qvec, vec))) > best.similarity:
                best = Closest(sim, p)
        out.append(best)
    return out
