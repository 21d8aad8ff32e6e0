"""The second hop by words: what the best user turns say beyond the question.

A question that needs two remarks names the first link only: "what has to be ready by
March 14th?" finds "the board meeting is on the 14th of March", but the answer ("Kemi
needs the revenue slides finished before the board sees them") shares no word with the
question and little meaning: it is close to the first remark, not to the question. The
entity round (:mod:`memd.engine.retrieval.rounds`) reaches it only when the link is an
entity the extractor knows (a project's name); a chain through a common noun ("the
board", "the nightly export job", "audit logs") has none, and it seeds from one turn, so
a distractor that repeats the question's name ("Tomasz is out on holiday") in first
place leaves the real first link's entities unread.

So each of the first round's best ``seeds`` user messages asks the full-text index for
the messages that share the content words its passage closest to the question holds
beyond the question's (compared by their first five letters, as
:mod:`memd.engine.retrieval.relevance` does; the passage, because a remark made in
passing inside a message about something else would bring that something else's words;
the whole message when it has no embedded passage); the best user message of another
session that is not already among the top ``after`` user messages is that seed's hop.

Merge rule: a reserved share of the ranking, not a bonus on the first round's score
scale. A hop's cosine with the question is low by construction (it is the remark the
question does not describe), so a bonus that lifted it also lifted the seeds'
distractors over single-hop answers; a reserved place does not. The hops take the
places right after the first ``after`` user messages, scored just under the message
they follow, and everything below them moves down in the same order; the first
``after`` user messages keep their places and scores, so a search's top ``after`` user
turns are the first round's.

Measured on the generated team histories of ``bench/bench_generalize.py``; the bench's
README ("A team's weeks") gives the figures and the variants that were not kept (a
vector search along the seed's direction beyond the question's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memd.backends.base import MessageStore
from memd.config import Weights
from memd.engine.retrieval.passages import closest
from memd.engine.retrieval.relevance import content_words, text_stems
from memd.engine.retrieval.rounds import message_score
from memd.models.embedder import CachedEmbedder
from memd.types import Message, ScoredMessages


@dataclass(frozen=True, slots=True)
class SecondHop:
    """How the hop runs: how many of the best user messages seed it (one hop each at
    most), after how many first-round user messages the hops enter, and how many
    messages each full-text lookup fetches."""

    seeds: int = 1
    after: int = 5
    fetch: int = 12


def hop_of(seeds: int) -> SecondHop | None:
    """The hop the ``search_second_hop`` setting asks for; None for 0."""
    return SecondHop(seeds=seeds) if seeds > 0 else None


def beyond(seed: str, query: str) -> str:
    """The content words of ``seed`` whose stems the query does not hold, as one
    full-text query (empty when the seed says nothing more)."""
    asked = text_stems(query)
    return " ".join(sorted(w for w in content_words(seed) if w[:5] not in asked))


def _head_end(first: ScoredMessages, n: int) -> int:
    """How many hits of ``first`` it takes to hold its best ``n`` user messages."""
    seen = 0
    for i, (msg, _, _) in enumerate(first):
        if msg.role == "user" and msg.safe_text:
            seen += 1
            if seen == n:
                return i + 1
    return len(first)


def hops(store: MessageStore, user_id: str, query: str, seeds: Sequence[Message],
         said: Sequence[str], taken: set[str], rule: SecondHop, session_id: str | None,
         ) -> list[Message]:
    """Each seed's hop, seed by seed: the best user message of another session that
    shares the words the seed's ``said`` (its passage closest to the query) holds beyond
    the query, and is not in ``taken``."""
    out: list[Message] = []
    for seed, text in zip(seeds, said, strict=True):
        words = beyond(text, query)
        if not words:
            continue
        for msg, _ in store.keyword_messages(user_id, words, rule.fetch, session_id):
            if (msg.role == "user" and msg.safe_text and msg.session_id != seed.session_id
                    and msg.id not in taken):
                taken.add(msg.id)
                out.append(msg)
                break
    return out


def second_hop(
    store: MessageStore, embedder: CachedEmbedder, user_id: str, query: str,
    qvec: np.ndarray, first: ScoredMessages, weights: Weights, now: float,
    session_id: str | None = None, rule: SecondHop = SecondHop(),
) -> ScoredMessages:
    """``first`` (best first) with the hops placed after its first ``rule.after`` user
    messages, best first."""
    end = _head_end(first, rule.after)
    head = list(first[:end])
    seeds = [m for m, _, _ in head if m.role == "user" and m.safe_text][:rule.seeds]
    said = [c.text or (m.safe_text or "") for m, c in zip(
        seeds, closest(embedder, [m.safe_text or "" for m in seeds], qvec), strict=True)]
    found = hops(store, user_id, query, seeds, said, {m.id for m, _, _ in head}, rule,
                 session_id)
    if not found:
        return first
    known = {m.id: (t, p) for m, t, p in first}
    placed: ScoredMessages = []
    at = head[-1][1]
    for msg, vec in zip(found, embedder.cached([m.safe_text or "" for m in found]),
                        strict=True):
        if msg.id in known:
            total, parts = known[msg.id]
        else:
            sim = float(np.dot(qvec, vec)) if vec is not None else 0.0
            total, parts = message_score(msg, sim, 0.0, weights, now)
        at = math.nextafter(at, -math.inf)
        placed.append((msg, at, {**parts, "second_hop": at - total}))
    chosen = {m.id for m in found}
    tail = [(m, t, p) for m, t, p in first[end:] if m.id not in chosen]
    # Below the hops, in the same order: every score moves down by the same amount.
    drop = max(0.0, tail[0][1] - math.nextafter(at, -math.inf)) if tail else 0.0
    return head + placed + [(m, t - drop, {**p, "second_hop": -drop} if drop else p)
                            for m, t, p in tail]
