"""Whether a remembered item is about a request: the floor that keeps the rest out.

A memory block is read by the model as knowledge about the request, so an item that is
not about it is worse than none: precision comes before recall, and a question unrelated
to everything the user said gets no block at all. The cosine of MiniLM vectors alone does
not separate the two well enough: on LongMemEval_S the user turns that answer a question
have a median cosine of about 0.33 with it, and other users' questions still reach about
0.3 with some turn of any long history. Words the item shares with the request do
separate them, so an item is related (:func:`related`) when its cosine reaches the floor
and it shares at least ``SHARED_WORDS`` of the request's content words (one, for a
request of one or two), or when it holds every content word of the request and half the
floor, or when its cosine alone reaches the ``sure`` floor
(bench/README.md, "bench_precision.py", has the measurements these were chosen on).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Final

#: Content words of the request an item must share, besides reaching the floor (one,
#: when the request has no more than ``SHORT_QUERY`` of them).
SHARED_WORDS: Final = 2
SHORT_QUERY: Final = 2
#: An item that holds every content word of the request needs only this share of the
#: floor: a short request ("how do we deploy?") names all it is about.
COVERED_FLOOR: Final = 0.5
#: Words match on their first letters: "graduated" and "graduation", "cats" and "cat".
STEM: Final = 5

_WORD = re.compile(r"[a-z0-9][a-z0-9'._-]*[a-z0-9]|[a-z0-9]")
#: Words that say nothing of what a text is about: function words, the block's own
#: labels, and the words every question is made of.
_FILLER = frozenset("""a an the and or but if of to in on at by for with from as is are
was were be been being it its this that these those i i'm i've am me my mine you your he she
they them their we our us user user's assistant earlier reply do does did done have has
had not no so than then there here what which who whom whose when where how why can could
would should will shall may might just about also any some many much more most get got
please tell know like want one ones thing things""".split())


@lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    """The words of ``text`` that say what it is about, lower case (kept for the texts
    met again: a user's memories and messages are judged query after query)."""
    return frozenset(w.removesuffix("'s") for w in _WORD.findall(text.lower())
                     if w not in _FILLER)


@lru_cache(maxsize=1024)  # a request's words are judged against item after item
def stems(words: frozenset[str]) -> frozenset[str]:
    return frozenset(w[:STEM] for w in words)


@lru_cache(maxsize=4096)
def text_stems(text: str) -> frozenset[str]:
    """The stems of ``text``'s content words, kept as :func:`content_words` is."""
    return stems(content_words(text))


def related(similarity: float, query: frozenset[str], text: str, floor: float,
            sure: float, share: float = 0.0) -> bool:
    """Whether an item of ``text`` whose cosine with the request is ``similarity`` is
    about the request, whose content words are ``query`` (see the module docstring);
    with ``share``, it must also share at least that share of the request's content
    words (a sentence of a longer text, whose cosine is high more easily)."""
    if similarity >= sure:
        return True
    wanted, have = stems(query), text_stems(text)
    shared = len(wanted & have)
    if wanted and shared == len(wanted) and similarity >= floor * COVERED_FLOOR:
        return True  # it says every word the request is about
    if similarity < floor:
        return False
    need = (min(SHARED_WORDS, len(wanted)) if len(wanted) > SHORT_QUERY
            else min(1, len(wanted)))
    return shared >= max(need, math.ceil(share * len(wanted)))
