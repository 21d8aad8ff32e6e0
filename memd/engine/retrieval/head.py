"""The head of a message ranking, ordered by how much of the question a keyword match covers.

The score sums a message's similarity and its keyword part, and the keyword part is BM25
over the query's best BM25: the message that shares the question's rarest word gets the
whole keyword weight even when that word is all it shares. Lower in the list that is
what lets a remark the meaning misses be found at all (a shared "new" is the only link
between "Finance froze all new SaaS subscriptions" and "...a new observability
product?"), so the list as a whole keeps the sum. Its first places are another matter:
"Our analytics vendor keeps everything in us-east-1" came first for "Would a document
store be a sensible fit for the next analytics service?", above the remark that answers
it and that the meaning ranks first ("We tried MongoDB last year and dropped it"),
by the one word "analytics".

So the first ``HEAD`` messages, the same set, are put in a new order where a message's
keyword part counts only as far as it covers the question: in proportion to the share of
the question's content words (:func:`memd.engine.retrieval.relevance.content_words`, by
their stems) it says, whole from ``1 / SPREAD`` of them on. A message that names one of
the question's entities keeps its keyword part whole (a name is the rare word a user
repeats, whatever the sentence around it). The head keeps its scores, handed out again
in the new order, so the messages below it and the other kinds of hit keep their
places; each moved message's breakdown says by how much (``head``), so its parts still
add up to its score. Measured on the generated team histories and LongMemEval_S
(bench/README.md, "A team's weeks").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memd.engine.retrieval.relevance import text_stems
from memd.types import Message, ScoredMessages

#: How many of the first messages are put in the new order.
HEAD = 5
#: A message that says this share's inverse of the question's content words keeps its
#: whole keyword part in the head (2: half of them).
SPREAD = 2.0


def covered(keyword: float, wanted: frozenset[str], text: str,
            spread: float = SPREAD) -> float:
    """The part of ``keyword`` a message of ``text`` keeps for a question whose content
    word stems are ``wanted``: ``min(1, spread * shared / len(wanted))`` of it."""
    if not wanted:
        return keyword
    shared = len(wanted & text_stems(text))
    return keyword * min(1.0, spread * shared / len(wanted))


def ordered_head(scored: Sequence[tuple[Message, float, dict[str, float]]], query: str,
                 names: Sequence[str] = (), head: int = HEAD,
                 spread: float = SPREAD) -> ScoredMessages:
    """``scored`` (best first) with its first ``head`` messages in the order of their
    scores with the keyword part :func:`covered` (whole for a message that names one
    of ``names``, as a whole word, any case); the head's scores are handed out again
    in that order, the rest is as it was."""
    wanted = text_stems(query)
    top = list(scored[:head])
    if not wanted or len(top) < 2:
        return list(scored)
    named = (re.compile(r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\b",
                        re.IGNORECASE) if names else None)

    def judged(total: float, parts: dict[str, float], text: str) -> float:
        keyword = parts.get("keyword", 0.0)
        if keyword <= 0.0 or (named is not None and named.search(text)):
            return total
        return total - keyword + covered(keyword, wanted, text, spread)

    order = sorted(top, key=lambda t: (-judged(t[1], t[2], t[0].safe_text or ""), t[0].id))
    places = sorted((total for _, total, _ in top), reverse=True)
    out: ScoredMessages = []
    for (msg, total, parts), place in zip(order, places, strict=True):
        moved = {**parts, "head": parts.get("head", 0.0) + place - total}
        out.append((msg, place, moved if place != total else parts))
    return out + list(scored[head:])
