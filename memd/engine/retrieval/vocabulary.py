"""Whether the user's history knows what a request is about: the gate before any block.

A question the user's history can answer, or is about, is made of words that history
holds: "What breed is my dog?" asked of someone who talked about their dog. A question
about something the user never mentioned ("How many times have I worn my new Converse?"
asked of someone who never wrote "Converse") names a thing no stored message names, and
whatever the cosine finds for it is about a neighbouring topic ("I bought new running
shoes"): read as memory, it misleads. So before the relevance rule of each item
(:mod:`memd.engine.retrieval.relevance`), the request as a whole must pass :func:`knows`: every
content word of it occurs in some stored message of the user (the full-text index,
replies included), and at most ``REPLY_ONLY`` of them occurs only in the assistant's
replies, never in the user's own words (a word the assistant used but the user never
did is usually a common word, such as a question's verb, not the thing asked about).
Words a question is framed with (``FRAME``: "how often", "how many days") are not
looked up. A short history has no vocabulary to speak of (a user of a few
conversations has not yet said most of the words of the things they will ask about), so
the gate holds only from ``MIN_SESSIONS`` conversations on (:func:`has_vocabulary`).

The figures this was chosen on (LongMemEval_S, 40 users) and checked on (other sets of
questions) are in bench/README.md, "bench_precision.py".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from memd.backends.common.fulltext import keyword_part
from memd.engine.retrieval.relevance import STEM, content_words

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.types import Message

#: Words a question is framed with rather than about (how much, how often, when, what
#: was said): a history need not hold them for the question to be about it. Whole
#: words: "conversation" is one, "Converse" is not.
FRAME: Final = frozenset("""day days week weeks month months year years time times often
total number many much first last ago recent recently usually spend spent pass passed
spending happen happened percentage percent average previous conversation conversations
mention mentioned remind said""".split()) | frozenset(
    # when, in what order and how many: a question's calendar and counting words, which
    # a history need not hold in the question's form ("last Saturday", "from earliest
    # to latest", "the two novels")
    """monday tuesday wednesday thursday friday saturday sunday weekend weekends january
    february march april june july august september october november december today
    yesterday tomorrow lately earlier earliest later latest order before after since
    two three four five six seven eight nine ten twice""".split())
#: Content words of a request that may be found only in the assistant's replies.
REPLY_ONLY: Final = 1
#: Messages read per word: the user's own use of a word ranks high among them (a user
#: message is shorter than a reply, and full-text ranking favours short texts).
PER_WORD: Final = 20
#: The words of a request checked, at most (its first ones).
MAX_WORDS: Final = 12
#: The conversations a user's history needs before its words say what it is about.
MIN_SESSIONS: Final = 20
#: Seconds a long history is taken as still long (:class:`LongHistories`).
LONG_HISTORY_TTL: Final = 60.0
#: What the cosine floors (memd.config: min_similarity and recall_min_similarity,
#: sure_similarity) are raised by where the gate cannot judge: the floors chosen before
#: it, when the cosine and the shared words were all there was.
UNGATED_FLOOR: Final = 0.1
UNGATED_SURE: Final = 0.05


@dataclass(frozen=True, slots=True)
class Known:
    """Where the content words of a request occur in the user's stored messages: the
    words (by their stems) found nowhere, and those found only in assistant replies."""

    absent: frozenset[str]
    reply_only: frozenset[str]

    @property
    def passes(self) -> bool:
        """Whether the history knows the request (see the module docstring)."""
        return not self.absent and len(self.reply_only) <= REPLY_ONLY


def forms(word: str) -> list[str]:
    """``word`` and the forms the full-text index may hold it in (it matches whole
    words): without a plural, past or -ing ending, and with a plural one."""
    out = [word, word + "s"]
    for end in ("s", "es", "ed", "d", "ing", "ly"):
        if word.endswith(end) and len(word) - len(end) >= STEM - 1:
            out.append(word[: -len(end)])
    return list(dict.fromkeys(out))


def has_vocabulary(store: Store, user_id: str) -> bool:
    """Whether ``user_id``'s history is long enough for :func:`knows` to mean anything."""
    return len(store.list_sessions(user_id, limit=MIN_SESSIONS)) >= MIN_SESSIONS


class LongHistories:
    """:func:`has_vocabulary` for every query, its yes kept ``ttl`` seconds per user
    instead of asked of the store each time. A history only grows, but for a forget or
    an erasure; a yes kept past one of those only keeps the gate on, and :func:`knows`
    then finds fewer of the query's words: stricter, never looser."""

    def __init__(self, ttl: float = LONG_HISTORY_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._until: dict[str, float] = {}  # user id -> when its yes is asked again

    def has_vocabulary(self, store: Store, user_id: str) -> bool:
        now = self._clock()
        if self._until.get(user_id, now) > now:
            return True
        if not has_vocabulary(store, user_id):
            return False
        if len(self._until) >= 10_000:
            self._until.clear()
        self._until[user_id] = now + self._ttl
        return True


def knows(store: Store, user_id: str, query: str,
          sent: Callable[[Message], bool] = lambda m: False, said: Iterable[str] = ()
          ) -> Known:
    """Where ``query``'s content words occur in ``user_id``'s stored messages, those for
    which ``sent`` is true left out (what the client sent in this request: the question
    itself, once stored, knows its own words). A word of ``said`` (the texts of the
    user's memories and facts at hand, which may have been added without a message) is
    known as the user's without a look-up."""
    words = {w[:STEM]: w for w in sorted(content_words(query)) if w not in FRAME}
    have = frozenset(w[:STEM] for t in said for w in content_words(t))
    absent: set[str] = set()
    reply_only: set[str] = set()
    for stem in sorted(words.keys() - have)[:MAX_WORDS]:
        found = store.keyword_messages(user_id, " or ".join(forms(words[stem])), PER_WORD)
        # the shortest form's stem: "walks" is found where the user wrote "walk"
        shortest = min(forms(words[stem]), key=len)[:STEM]
        roles = _roles(shortest, (m for m, _ in found if not sent(m)))
        if not roles:
            absent.add(stem)
        elif "user" not in roles:
            reply_only.add(stem)
    return Known(frozenset(absent), frozenset(reply_only))


def _roles(stem: str, messages: Iterable[Message]) -> set[str]:
    """The roles of the ``messages`` that hold a word starting with ``stem`` in the part
    of their text the full-text index holds."""
    word = re.compile(r"(?<![a-z0-9])" + re.escape(stem))
    return {m.role for m in messages
            if word.search(keyword_part(m.safe_text or "").lower())}
