"""A user message that a better-ranked one says word for word goes to the end of the list.

People say the same short things again and again across their sessions ("Is that too
formal?", "Can you make it shorter?", "What would a skeptical reviewer ask?"), and a
question that one copy matches matches every copy as well, with the same score, so the
first places of a ranking can hold several copies of one text in place of the remarks
that answer the question. The same holds for a request said again inside a longer
message ("Nice, that worked. Is that too formal?"). A message whose whole text a
better-ranked message says (compared as words: case and punctuation aside) tells the
reader nothing that one did not, so it follows the last message that is no such repeat,
in the same order, each scored just under the one before it (a ``repeat`` part in its
breakdown says by how much, so its parts still add up to its score). Nothing is dropped:
a caller that asks for many hits still gets every repeat, each with its own session and
date. Only the user's messages are compared, with one another: a reply may quote the
request it answers, and that does not make the request a repeat. A message without
words is never a repeat.
Measured on the generated team histories and LongMemEval_S (bench/README.md, "A team's
weeks").
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

from memd.types import Message, ScoredMessages

#: Punctuation read as a space (a table for ``str.translate``: faster than a pattern).
_SPACES = str.maketrans(string.punctuation, " " * len(string.punctuation))


def words(text: str) -> str:
    """``text`` as its words, lower case, between single spaces (and one at each end, so
    that one text holds another's words only at word boundaries); empty without words."""
    said = " ".join(text.lower().translate(_SPACES).split())
    return f" {said} " if said else ""


def once(scored: Sequence[tuple[Message, float, dict[str, float]]]) -> ScoredMessages:
    """``scored`` (best first) with every user message whose words a user message above
    it says whole moved after the last message that is no such repeat, in the same
    order."""
    first: ScoredMessages = []
    again: ScoredMessages = []
    said: set[str] = set()
    for item in scored:
        msg = item[0]
        text = words(msg.safe_text or "") if msg.role == "user" else ""
        if text and (text in said or any(text in other for other in said
                                         if len(other) > len(text))):
            again.append(item)
            continue
        first.append(item)
        if text:
            said.add(text)
    if not again:  # else ``first`` holds the best user message at least
        return list(scored)
    out = first
    at = first[-1][1]
    for msg, total, parts in again:
        at = min(total, math.nextafter(at, -math.inf))
        out.append((msg, at, {**parts, "repeat": parts.get("repeat", 0.0) + at - total}
                    if at != total else parts))
    return out
