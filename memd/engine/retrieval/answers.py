"""Whether a recalled message may answer the question: a score beyond its cosine.

The relevance rule (:mod:`memd.engine.retrieval.relevance`) and the vocabulary gate
(:mod:`memd.engine.retrieval.vocabulary`) keep out what is not about the question. What they let
through for a question the history does not answer is mostly on its topic: "I'll talk to
my vet about what human foods to give my dog" for "What breed is my dog?". Such a line
says the words of the question but not what it asks for, and read as memory it misleads.
A few features of the line, beyond its cosine, tell the two apart a little better
(:func:`features`):

- its cosine with the question;
- the share of the question's content words it says, words the question is framed with
  (``vocabulary.FRAME``: "how many days", "last Saturday") left out;
- whether it holds a word of the kind the question asks for: a number for "how many",
  "how much", "how often", "how long" or "how old", a number or calendar word for "when"
  (other questions: neither for nor against);
- whether it only asks (a line ending in a question mark says less than a statement);
- how many content words the question has (a long, specific question that a line
  matches is less often a coincidence), and the line's length.

They are weighed by a logistic model (:data:`WEIGHTS`) fitted on the candidates of
LongMemEval_S's first 40 users of ``bench_precision.py`` (the default run), the evidence
lines of the users' own questions against the lines recalled for other users'
questions, and checked on other sets of questions never fitted on (bench/README.md,
"bench_precision.py"). A recalled message is kept when its score reaches the
``recall_answer_floor`` setting (:func:`likelihood`); 0 keeps every message the
relevance rule kept.

The score also decides for the question as a whole: nothing is recalled for it unless
its likeliest answer, among the lines the relevance rule kept, reaches the higher
``recall_question_floor``. An unrelated question's block is misleading if it holds any
line, and what lets such a line through is usually one weak score among weak scores,
while a question the history answers usually has one line that clearly looks like the
answer, beside others on its topic that the lower per-line floor keeps. One decision
per question separated the two better than any per-line floor did (bench/README.md).

A request for advice ("Can you suggest some accessories for my phone?") asks for no fact,
so no line looks like its answer; what helps is what the user said about the thing of
theirs the request names ("I'm looking for a case for my iPhone 13 Pro" for "my phone").
So for a request for advice that names something of the user's (:func:`advice_object`:
the words after "my"), a statement of the user's that says that word and whose cosine
alone is sure (``sure_similarity``) meets the question floor too. Letting every advice
request with a related line through admitted six unrelated questions for one own; a sure
cosine alone still admitted lines that share only the request's framing ("learn more
about", "recommend some resources"); the user's own thing is what tells them apart
(bench/README.md).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Final

from memd.engine.retrieval.relevance import content_words
from memd.engine.retrieval.vocabulary import FRAME

#: The weights of :func:`features`, in order, and the bias (the model's intercept).
WEIGHTS: Final = (3.146, 1.539, 0.991, -1.165, 0.275, 0.42)
BIAS: Final = -6.971
_NUMBER_Q = re.compile(r"\bhow (many|much|often|long|old|far)\b")
_TIME_Q = re.compile(r"\bwhen\b|\bwhat (date|day|time|year|month)\b")
_ADVICE_Q = re.compile(r"\b(suggest|recommend|tips|ideas|advice)\b")
#: What follows "my": the thing of the user's a request names (two words at most).
_MINE = re.compile(r"\bmy\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*)?)")
#: Words after "my" that say which one, not what: "my new phone" is about the phone.
_NOT_THINGS: Final = FRAME | frozenset({"new", "old", "own", "current"})
_LETTERS = re.compile(r"[a-z]+")
_DIGIT = re.compile(r"\d")
NUMBER_WORDS: Final = frozenset("""one two three four five six seven eight nine ten eleven
twelve fifteen twenty thirty forty fifty hundred thousand dozen once twice half couple few
several""".split())
CALENDAR_WORDS: Final = frozenset("""january february march april may june july august
september october november december monday tuesday wednesday thursday friday saturday
sunday yesterday today tomorrow week weeks month months year years ago last""".split())
#: The stems compared (relevance's: the first letters of a word).
_STEM = 5


def asks_for(query: str) -> str:
    """The kind of word ``query`` asks for: "number", "time", or "" (anything)."""
    q = query.lower()
    if _NUMBER_Q.search(q):
        return "number"
    if _TIME_Q.search(q):
        return "time"
    return ""


def advice_object(query: str) -> frozenset[str]:
    """The stems of what a request for suggestions, tips or advice says is the user's
    ("my phone", "my bedroom"); empty when ``query`` asks for a fact or names nothing of
    the user's."""
    q = query.lower()
    if not _ADVICE_Q.search(q):
        return frozenset()
    return frozenset(w[:_STEM] for m in _MINE.finditer(q)
                     for w in content_words(m.group(1)) if w not in _NOT_THINGS)


def holds(kind: str, text: str) -> float:
    """1.0 when ``text`` holds a word of ``kind`` (:func:`asks_for`), else 0.0; 0.5 for
    a question that asks for no kind in particular."""
    if not kind:
        return 0.5
    if _DIGIT.search(text):
        return 1.0
    wanted = NUMBER_WORDS if kind == "number" else CALENDAR_WORDS
    return 1.0 if any(w in wanted for w in _LETTERS.findall(text.lower())) else 0.0


def features(similarity: float, query: str, text: str) -> tuple[float, ...]:
    """The features of a recalled line of ``text`` (the user's words as the block shows
    them) whose cosine with ``query`` is ``similarity``, in :data:`WEIGHTS`' order."""
    asked, kind = _asked(query)
    said = {w[:_STEM] for w in content_words(text)}
    share = len(asked & said) / max(len(asked), 1)
    only_asks = 1.0 if text.strip().endswith("?") else 0.0
    return (similarity, share, holds(kind, text), only_asks,
            float(len(asked)), math.log(len(text) + 1))


@lru_cache(maxsize=256)
def _asked(query: str) -> tuple[frozenset[str], str]:
    """The stems ``query`` asks about (its frame words left out) and the kind of word
    it asks for: the same for every line recalled for it."""
    return (frozenset(w[:_STEM] for w in content_words(query) if w not in FRAME),
            asks_for(query))


def likelihood(similarity: float, query: str, text: str) -> float:
    """How likely the line answers ``query``, between 0 and 1 (see the module
    docstring)."""
    z = BIAS + sum(w * x for w, x in zip(WEIGHTS, features(similarity, query, text),
                                         strict=True))
    return 1.0 / (1.0 + math.exp(-z))
