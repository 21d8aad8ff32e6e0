"""A second retrieval round over messages, seeded by the first round's best user turn.

A question that needs two remarks often names only the first: "what is the deadline for
the thing Tomasz is running?" finds "Tomasz is the lead on Lumen now", but the deadline
was said in another session about Lumen, not about Tomasz, so it shares little with the
question. The second round takes the first round's best ``seeds`` user messages, and asks
the full-text index for the messages that name the entities (people, projects, tech
terms: :func:`memd.engine.learning.extract.extract_entities`) a seed names beyond the
question. Each such message of another session than its seed gains ``bonus`` times the
similarity weight, added to its own score (a message new to the candidates gets its
first-round score first: its cosine with the query from the embedding cache).

The fixed merge rule: the first round's hits up to and including the last seed keep
their places and scores; a message that gains never rises above them (its score is capped
just under theirs), so the turn that answered the question directly stays first and the
second hop comes right after it. Entities, not the seed's vector, seed the round: on the
generated team histories of ``bench/bench_generalize.py`` the seed's vector neighbours
pushed single-hop evidence out of the top ten, its entities did not.

With ``kin`` the question is expanded too: a question that names a vocabulary term
("Rust", a language) asks about the others of its kind the user has spoken of ("most of
us came from Python", "we picked Go"), so the messages that name another term of the
same kind gain the same bonus, under the same cap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from memd.backends.base import MessageStore
from memd.config import Weights
from memd.engine.learning.extract import extract_entities
from memd.engine.learning.extract.entities import scan_terms
from memd.engine.learning.extract.vocab import TERMS
from memd.engine.retrieval.score import Signals, score
from memd.models.embedder import CachedEmbedder
from memd.types import Message, Provenance, ScoredMessages


@dataclass(frozen=True, slots=True)
class SecondRound:
    """How the second round runs: how many of the first round's best user messages seed
    it (0: none), whether the question's vocabulary terms bring their kin, how many
    messages each lookup fetches, and what a reached message gains (a share of the
    similarity weight)."""

    seeds: int = 1
    kin: bool = True
    fetch: int = 20
    bonus: float = 0.15


def rule_of(second_round: bool, expand_kinds: bool) -> SecondRound | None:
    """The round the two settings ask for; None when both are off."""
    if not (second_round or expand_kinds):
        return None
    return SecondRound(seeds=1 if second_round else 0, kin=expand_kinds)


@cache
def _kin_of(kind: str) -> tuple[str, ...]:
    """Every canonical vocabulary term of ``kind``."""
    return tuple(sorted({name for name, k in TERMS.values() if k == kind}))


def kin_terms(query: str) -> list[str]:
    """The other vocabulary terms of the kinds the query's terms are of ("rust", a
    language: "go", "python", ...), without the query's own."""
    terms = [t for t in scan_terms(query) if t.kind]
    named = {t.name for t in terms}
    return sorted({n for t in terms for n in _kin_of(t.kind)} - named)


def message_score(msg: Message, similarity: float, keyword: float, weights: Weights,
                  now: float) -> tuple[float, dict[str, float]]:
    """A message's score with the search's formula (neutral authority and importance:
    messages have no access history or provenance)."""
    return score(
        Signals(similarity=similarity, keyword=keyword,
                hours_since_access=max(0.0, (now - msg.created_at) / 3600.0),
                confidence=0.5, provenance=Provenance.SYSTEM_INFERRED, importance=0.3),
        weights,
    )


def _seeds(first: ScoredMessages, n: int) -> tuple[list[Message], int]:
    """The best ``n`` user messages of ``first`` and how many hits of ``first`` are
    pinned (up to and including the last seed)."""
    at = [i for i, (m, _, _) in enumerate(first) if m.role == "user" and m.safe_text][:n]
    return [first[i][0] for i in at], (at[-1] + 1 if at else 0)


@lru_cache(maxsize=512)
def _entities_of(text: str) -> tuple[str, ...]:
    """A seed's entities, kept: a user's best messages are seeds search after search."""
    return extract_entities(text)


def _reached(store: MessageStore, user_id: str, query: str, seeds: Sequence[Message],
             rule: SecondRound, session_id: str | None, asked: set[str],
             ) -> dict[str, Message]:
    """Messages that name what a seed names beyond the query's entities ``asked``,
    outside the seed's session, and (``rule.kin``) those that name a kin of the query's
    vocabulary terms."""
    fetch = rule.fetch
    out: dict[str, Message] = {}
    kin = kin_terms(query) if rule.kin else []
    if kin:
        for msg, _ in store.keyword_messages(user_id, " ".join(kin), fetch, session_id):
            out.setdefault(msg.id, msg)
    for seed in seeds:
        named = sorted(set(_entities_of(seed.safe_text or "")) - asked)
        if not named:
            continue
        for msg, _ in store.keyword_messages(user_id, " ".join(named), fetch, session_id):
            if msg.session_id != seed.session_id:
                out.setdefault(msg.id, msg)
    return out


def second_round(
    store: MessageStore, embedder: CachedEmbedder, user_id: str, query: str,
    qvec: np.ndarray, first: ScoredMessages, weights: Weights, now: float,
    session_id: str | None = None, rule: SecondRound = SecondRound(), *,
    names: Sequence[str],
) -> ScoredMessages:
    """``first`` (best first) with the second round's messages merged in, best first
    (``names``: the query's entities, which the caller has extracted)."""
    seeds, pinned = _seeds(first, max(rule.seeds, 1))  # the best user hit stays on top
    reached = _reached(store, user_id, query, seeds[:rule.seeds], rule, session_id,
                       set(names))
    if not reached:
        return first
    known = {m.id for m, _, _ in first}
    new = [m for mid, m in reached.items() if mid not in known]
    rest = list(first[pinned:])
    for msg, vec in zip(new, embedder.cached([m.safe_text or "" for m in new]), strict=True):
        sim = float(np.dot(qvec, vec)) if vec is not None else 0.0
        rest.append((msg, *message_score(msg, sim, 0.0, weights, now)))
    cap = math.nextafter(min((t for _, t, _ in first[:pinned]), default=math.inf),
                         -math.inf)
    merged = []
    for msg, total, parts in rest:
        if msg.id in reached:
            raised = max(total, min(total + rule.bonus * weights.similarity, cap))
            parts = {**parts, "second_round": raised - total}
            total = raised
        merged.append((msg, total, parts))
    merged.sort(key=lambda t: (-t[1], t[0].id))
    return list(first[:pinned]) + merged
