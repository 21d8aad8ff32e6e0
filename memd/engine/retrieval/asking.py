"""A user message that only asks something weighs less in a message ranking than one that
states something.

What a user asked the assistant ("How would I type-annotate that?", "Can you make it
shorter?") says nothing about the user; what they stated ("We picked Go for the ingest
service because hiring for it is easy", "Bruno went vegan in the autumn") is what a
later question about their situation needs. A question is also worded like the questions
a user puts to search, so by the meaning alone the user's earlier questions on the same
subject come first ("Would the others be comfortable if I wrote the new parser in
Rust?" is closest to the coding questions of other sessions), above the remarks that
answer it. Recall weighs such a message down for the same reason
(memd.engine.retrieval.recall).

So a user message that only asks (:func:`memd.engine.retrieval.passages.only_asks`:
every sentence of it a question) counts ``WEIGHT`` of its score; a message that states
anything beside its question keeps its own. Nothing is dropped: a question that is the
only match of a search still comes back, below the statements that match as well, and
its breakdown's ``asking`` part says by how much it was lowered, so its parts still add
up to its score. Assistant messages keep their scores. It runs after the second hop and
the time cues, which place their messages among the scores as they were, and before the
head's order (memd.engine.retrieval.head). Measured on the generated team histories and
LongMemEval_S (bench/README.md, "A team's weeks").
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from memd.engine.learning.templates import user_words
from memd.engine.retrieval.passages import SPAN_CHARS, only_asks
from memd.engine.validate import excerpt
from memd.types import Message, ScoredMessages

#: The share of its score a user message that only asks keeps.
WEIGHT = 0.5


@lru_cache(maxsize=1024)
def asks_only(text: str) -> bool:
    """Whether the user's words of ``text`` only ask something (kept for the texts search
    meets again: a user's best messages come back search after search)."""
    said = user_words(excerpt(text.strip(), SPAN_CHARS)).strip()
    return bool(said) and only_asks(said)


def lowered(scored: Sequence[tuple[Message, float, dict[str, float]]]) -> ScoredMessages:
    """``scored`` with every user message that only asks at ``WEIGHT`` of its score, best
    first (ties by id, as the ranking orders them)."""
    out: ScoredMessages = []
    moved = False
    for msg, total, parts in scored:
        if msg.role == "user" and total > 0 and asks_only(msg.safe_text or ""):
            low = total * WEIGHT
            out.append((msg, low, {**parts, "asking": parts.get("asking", 0.0) + low - total}))
            moved = True
        else:
            out.append((msg, total, parts))
    if not moved:
        return list(scored)
    out.sort(key=lambda t: (-t[1], t[0].id))
    return out
