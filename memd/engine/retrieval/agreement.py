"""Keyword evidence weighed by how well the meaning agrees with it.

The keyword channel's relevance is BM25 divided by the best BM25 of the query, so the
best keyword match gets the whole keyword weight whatever it matched: when the question's
words are all common ("would", "new", "next"), a message that shares one of them and
nothing of the question's meaning ("How would I explain this to sales? (Side note:
finance froze all new SaaS subscriptions.)" for "would the others be comfortable if I
wrote the new parser in Rust?") outranks the remarks that answer it, which share its
meaning and none of its words. Here a message's keyword part counts in proportion to its
similarity to the question against the candidates' second best similarity (the scale of
a close match, not set by one near copy of the question), with a floor: a keyword
match the meaning also supports keeps its weight, one the meaning does not support
keeps only the floor's share. A message that names what the question names (a person, a
project, a ticket, a tech term: the question's entities) keeps its keyword part whole: a
name is the rare word a user repeats, and the sentence around it may be about anything,
so its meaning cannot judge that match.

This is a product of the two channels' evidence where the score is otherwise their sum:
the sum lets either channel alone carry a message, the product asks the keyword channel
to be backed by the dense one or by a name. Measured on the generated team histories and
on LongMemEval_S (bench/README.md, "A team's weeks").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memd.types import Message, ScoredMessages

#: The share of its keyword part a message keeps however far its meaning is.
FLOOR = 0.25


def agreed(scored: Sequence[tuple[Message, float, dict[str, float]]],
           names: Sequence[str] = (), floor: float = FLOOR) -> ScoredMessages:
    """``scored`` (message, score, weighted parts) with the keyword part of each message
    that names none of ``names`` (as whole words, any case) scaled by
    ``floor + (1 - floor) * min(1, similarity / reference)``, best first; the reference
    is the second best similarity of ``scored`` (the best when there is one)."""
    named = (re.compile(r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\b",
                        re.IGNORECASE) if names else None)
    sims = sorted((parts.get("similarity", 0.0) for _, _, parts in scored), reverse=True)
    best = sims[min(1, len(sims) - 1)] if sims else 0.0
    out: ScoredMessages = []
    for msg, total, parts in scored:
        keyword = parts.get("keyword", 0.0)
        if keyword <= 0.0 or best <= 0.0 or (
                named is not None and named.search(msg.safe_text or "")):
            out.append((msg, total, parts))
            continue
        share = floor + (1.0 - floor) * min(1.0, parts.get("similarity", 0.0) / best)
        out.append((msg, total - keyword * (1.0 - share), {**parts, "keyword": keyword * share}))
    out.sort(key=lambda t: (-t[1], t[0].id))
    return out
