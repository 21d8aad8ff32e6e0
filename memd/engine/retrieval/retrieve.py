"""Hybrid retrieval: candidates from several channels, fused and scored.

Channels (docs/design.md, "Retrieval"):

- vector KNN over the user's memories (sqlite-vec / pgvector), top ``knn_k``;
- keyword search (FTS5 BM25 / tsvector), top ``keyword_k``;
- the user's most accessed global memories, top ``frequent_k``;
- memories linked to the entities named in the query;
- deterministic facts (all active facts of the user, so a stated fact is always recalled);
- messages and summaries, by vector and keyword, when the caller asks for them.

Every memory candidate gets its true cosine with the query (vectors are fetched for
candidates found by other channels), then the multi-signal score of
:mod:`memd.engine.retrieval.score`. Results are ordered by score, then id, so equal inputs give
equal output.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from memd.backends.base import Lifecycle, MemoryStore, MessageStore, Store, Vector
from memd.config import Settings, Weights
from memd.engine.learning.extract import extract_entities
from memd.engine.retrieval.agreement import agreed
from memd.engine.retrieval.asking import lowered
from memd.engine.retrieval.diverse import diverse
from memd.engine.retrieval.head import ordered_head
from memd.engine.retrieval.hops import SecondHop, hop_of, second_hop
from memd.engine.retrieval.passages import closest
from memd.engine.retrieval.repeats import once
from memd.engine.retrieval.rounds import SecondRound, rule_of, second_round
from memd.engine.retrieval.score import Signals, score
from memd.engine.retrieval.timecues import asks_recent, boost, window
from memd.models.embedder import CachedEmbedder
from memd.types import (
    Fact,
    Found,
    Hit,
    Memory,
    MemoryFilter,
    Message,
    Provenance,
    ScoredMessages,
    quick_init,
)

KINDS = ("memory", "summary", "message", "fact")

# Runs what needs no query vector while the caller embeds the query (onnxruntime and
# SQLite/psycopg release the GIL): a search's keyword channel over messages, a compile's
# history read. A few
# workers, so concurrent requests do not queue behind one another.
SIDE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memd-side")
T = TypeVar("T")


def aside(store: Lifecycle, fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` in a SIDE worker, as the same acting user (PostgreSQL's row-level
    security reads it from the context), its reads marked as side reads
    (``Store.side_reads``: the caller may hold a connection while it waits)."""
    def run() -> T:
        with store.side_reads():
            return fn(*args)

    return SIDE.submit(contextvars.copy_context().run, run)


@dataclass(frozen=True, slots=True)
class Channels:
    knn_k: int = 50
    keyword_k: int = 20
    frequent_k: int = 20
    entity_k: int = 20
    message_k: int = 20


@dataclass(frozen=True, slots=True)
class MessageRanking:
    """How a search ranks messages beyond the shared score: the second round (None for
    none, :mod:`memd.engine.retrieval.rounds`), time cues
    (:mod:`memd.engine.retrieval.timecues`), whether a user message's similarity is the
    better of its own and its closest passage's (a remark made in passing inside a
    message about something else is found by its own words, as recall finds it:
    :mod:`memd.engine.retrieval.passages`), and when a message's age counts
    (freshness: "always", "never", or "auto", only for a question about what is recent
    or current, :func:`memd.engine.retrieval.timecues.asks_recent`; without it an old
    remark that answers the question is not outranked by last week's small talk that
    shares a word with it), and whether a keyword match counts only as far as the
    message's meaning backs it (:mod:`memd.engine.retrieval.agreement`), and whether the
    first messages are ordered by how much of the question a keyword match covers
    (:mod:`memd.engine.retrieval.head`) and do not all say the same thing
    (:mod:`memd.engine.retrieval.diverse`), and whether a message that repeats a
    better-ranked one word for word goes to the end (:mod:`memd.engine.retrieval.repeats`),
    and whether a user message that only asks weighs less than a statement
    (:mod:`memd.engine.retrieval.asking`)."""

    second: SecondRound | None = None
    time_cues: bool = False
    passages: bool = False
    freshness: str = "always"
    agreement: bool = False
    head: bool = False
    diverse: bool = False
    hop: SecondHop | None = None  # the hop by words (memd.engine.retrieval.hops)
    once: bool = False
    asking: bool = False

    def ages(self, query: str, now: float) -> bool:
        """Whether a message's age counts in its score for ``query``."""
        if self.freshness == "auto":
            return asks_recent(query, now)
        return self.freshness != "never"

    @classmethod
    def of(cls, settings: Settings) -> MessageRanking:
        """The ranking the search settings ask for."""
        return cls(second=rule_of(settings.search_second_round, settings.search_expand_kinds),
                   time_cues=settings.search_time_cues, passages=settings.search_passages,
                   freshness=settings.search_message_freshness,
                   agreement=settings.search_keyword_agreement,
                   head=settings.search_head_coverage, diverse=settings.search_diversity,
                   hop=hop_of(settings.search_second_hop), once=settings.search_repeats_last,
                   asking=settings.search_questions_lower)


@quick_init
@dataclass(frozen=True, slots=True)
class ScoredMemory:
    memory: Memory
    score: float
    breakdown: dict[str, float]
    similarity: float


def _hours(now: float, then: float | None) -> float:
    return max(0.0, (now - (then or now)) / 3600.0)


def score_memories(
    store: MemoryStore, user_id: str, query: str, qvec: np.ndarray, flt: MemoryFilter,
    weights: Weights, now: float, channels: Channels = Channels(),
    shared: Sequence[tuple[str, MemoryFilter]] = (),
) -> list[ScoredMemory]:
    """Memory and summary candidates for ``query``, scored, best first. ``shared`` names
    other owners whose memories the user may read (fellow members of a workspace), each
    with the filter that says which (their global memories of that workspace): they
    come in through the vector, keyword and entity channels."""
    entities = extract_entities(query)
    found: dict[str, Found] = {}
    owners = ((user_id, flt, channels.frequent_k), *((o, f, 0) for o, f in shared))
    for owner, owner_flt, frequent_k in owners:
        found.update(store.memory_candidates(
            owner, query, qvec, owner_flt, knn_k=channels.knn_k,
            keyword_k=channels.keyword_k, entities=entities, entity_k=channels.entity_k,
            frequent_k=frequent_k,
        ))
    query_entities = set(entities)
    max_access = max((f.memory.access_count for f in found.values()), default=0)
    out = []
    for f in found.values():
        mem = f.memory
        total, parts = score(
            Signals(
                similarity=f.similarity, keyword=f.keyword,
                hours_since_access=_hours(now, mem.last_accessed_at or mem.created_at),
                access_count=mem.access_count, max_access_count=max_access,
                confidence=mem.confidence, provenance=mem.provenance,
                importance=mem.importance,
                entity_match=f.entity or bool(query_entities & set(mem.entities)),
            ),
            weights,
        )
        out.append(ScoredMemory(mem, total, parts, f.similarity))
    out.sort(key=lambda s: (-s.score, s.memory.id))
    return out


KeywordMessages = list[tuple[Message, float, Vector | None]]


def keyword_messages(
    store: MessageStore, user_id: str, query: str, k: int, session_id: str | None = None,
    vectors: bool = False,
) -> KeywordMessages:
    """The keyword channel over messages: (message, relevance, with ``vectors`` its stored
    vector, else None). Needs no query vector, so it can run while the query is embedded."""
    hits = store.keyword_messages(user_id, query, k, session_id)
    found = (store.get_message_vectors(user_id, [m.id for m, _ in hits])
             if vectors and hits else {})
    return [(m, rel, found.get(m.id)) for m, rel in hits]


def score_messages(
    store: MessageStore, user_id: str, query: str, qvec: np.ndarray, weights: Weights, now: float,
    k: int, session_id: str | None = None, embedder: CachedEmbedder | None = None,
    keyword_hits: KeywordMessages | None = None, passages: bool = False,
    nearest: Sequence[tuple[Message, float]] | None = None,
) -> ScoredMessages:
    """Messages for ``query``: vector and keyword channels, scored with the same formula
    (messages have no access history or provenance: neutral authority and importance).

    Like memory candidates, a message found by the keyword channel alone gets its true
    cosine with the query, from its stored vector when ``embedder`` is given (never
    computed here: a message whose embedding job has not run yet keeps similarity 0).
    ``keyword_hits`` and ``nearest``: the keyword and vector channels' results, when the
    caller ran them already; ``passages``: a user message's similarity is the better of
    its own and its closest passage's, read from the same cache (:class:`MessageRanking`)."""
    found: dict[str, Message] = {}
    sims: dict[str, float] = {}
    keyword: dict[str, float] = {}
    if nearest is None:
        nearest = store.nearest_messages(user_id, qvec, k, session_id)
    for msg, sim in nearest:
        found[msg.id], sims[msg.id] = msg, sim
    if keyword_hits is None:
        keyword_hits = keyword_messages(store, user_id, query, k, session_id,
                                        vectors=embedder is not None)
    for msg, rel, vec in keyword_hits:
        found.setdefault(msg.id, msg)
        keyword[msg.id] = rel
        if msg.id not in sims and msg.safe_text and vec is not None:
            sims[msg.id] = float(np.dot(qvec, vec))
    if passages and embedder is not None:
        said = [m for m in found.values() if m.role == "user" and m.safe_text]
        for msg, near in zip(said, closest(embedder, [m.safe_text or "" for m in said], qvec),
                             strict=True):
            sims[msg.id] = max(sims.get(msg.id, 0.0), near.similarity)
    out = []
    for mid, msg in found.items():
        total, parts = score(
            Signals(
                similarity=sims.get(mid, 0.0), keyword=keyword.get(mid, 0.0),
                hours_since_access=_hours(now, msg.created_at), confidence=0.5,
                provenance=Provenance.SYSTEM_INFERRED, importance=0.3,
            ),
            weights,
        )
        out.append((msg, total, parts))
    out.sort(key=lambda t: (-t[1], t[0].id))
    return out


def score_facts(
    facts: Sequence[Fact], query: str, qvec: np.ndarray, embedder: CachedEmbedder,
    weights: Weights, now: float,
) -> list[tuple[Fact, float, dict[str, float]]]:
    """Facts scored against the query (fact texts are embedded once, then cached)."""
    if not facts:
        return []
    vecs = embedder.embed([f.text for f in facts])
    words = {w for w in query.lower().split() if len(w) > 2}
    out = []
    for fact, vec in zip(facts, vecs, strict=True):
        text = fact.text.lower()
        overlap = sum(1 for w in words if w in text) / max(len(words), 1)
        total, parts = score(
            Signals(
                similarity=float(np.dot(qvec, vec)), keyword=min(overlap, 1.0),
                hours_since_access=_hours(now, fact.updated_at), confidence=fact.confidence,
                provenance=Provenance.USER_STATED, importance=fact.importance,
            ),
            weights,
        )
        out.append((fact, total, parts))
    out.sort(key=lambda t: (-t[1], t[0].id))
    return out


def search(
    store: Store, embedder: CachedEmbedder, user_id: str, query: str, k: int,
    kinds: Sequence[str], flt: MemoryFilter, weights: Weights, now: float,
    session_id: str | None = None, shared: Sequence[tuple[str, MemoryFilter]] = (),
    ranking: MessageRanking = MessageRanking(),
) -> list[Hit]:
    """Search memories, summaries, messages and facts; the best ``k`` hits overall
    (``shared``: see :func:`score_memories`; ``ranking``: how messages are ranked,
    :class:`MessageRanking`)."""
    message_k = max(k, 10)
    pending: Future[KeywordMessages] | None = None
    if "message" in kinds and not store.in_transaction():
        # Overlaps the query embedding (see SIDE), as the same acting user.
        pending = aside(store, keyword_messages, store, user_id, query, message_k,
                        session_id, True)
    try:
        qvec = embedder.embed_query(query)
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise
    hits: list[Hit] = []
    if "memory" in kinds or "summary" in kinds:
        for s in score_memories(store, user_id, query, qvec, flt, weights, now,
                                shared=shared):
            if s.memory.kind in kinds:
                m = s.memory
                hits.append(Hit(
                    kind=m.kind, id=m.id, text=m.text, score=s.score, breakdown=s.breakdown,
                    session_id=m.session_id, workspace=m.workspace, token_count=m.token_count,
                    created_at=m.created_at,
                    metadata={**m.metadata, "tier": int(m.tier), "tags": list(m.tags)},
                ))
    if "message" in kinds:
        said = weights if ranking.ages(query, now) else replace(weights, freshness=0.0)
        scored = score_messages(
            store, user_id, query, qvec, said, now, message_k, session_id, embedder,
            pending.result() if pending is not None else None, ranking.passages,
        )
        names = extract_entities(query)  # once: the rankings below all read them
        if ranking.agreement:
            scored = agreed(scored, names)
        if ranking.second is not None:
            scored = second_round(store, embedder, user_id, query, qvec, scored, said,
                                  now, session_id, ranking.second, names=names)
        if ranking.hop is not None:
            scored = second_hop(store, embedder, user_id, query, qvec, scored, said, now,
                                session_id, ranking.hop)
        cue = window(query, now) if ranking.time_cues else None
        if cue is not None:
            scored = boost(scored, cue, said)
        if ranking.asking:
            scored = lowered(scored)
        if ranking.head:
            scored = ordered_head(scored, query, names)
        if ranking.diverse:
            scored = diverse(scored, embedder)
        if ranking.once:
            scored = once(scored)
        for msg, total, parts in scored:
            hits.append(Hit(
                kind="message", id=msg.id, text=msg.safe_text or "", score=total,
                breakdown=parts, session_id=msg.session_id, token_count=msg.token_count,
                created_at=msg.created_at, metadata={**msg.metadata, "role": msg.role},
            ))
    if "fact" in kinds:
        # A fact stated by a memory among the hits is that memory's derived copy: show
        # the memory (the user's words) once, not both.
        stated = {t for h in hits for t in h.metadata.get("tags", ()) if t.startswith("fact:")}
        facts = [f for f in store.get_facts(user_id, workspaces=flt.workspaces)
                 if f"fact:{f.category}/{f.key}" not in stated]
        for fact, total, parts in score_facts(facts, query, qvec, embedder, weights, now):
            hits.append(Hit(
                kind="fact", id=fact.id, text=fact.text, score=total, breakdown=parts,
                workspace=fact.workspace, created_at=fact.created_at,
                metadata={**fact.metadata, "category": fact.category, "key": fact.key,
                          "value": fact.value},
            ))
    hits.sort(key=lambda h: (-h.score, h.kind, h.id))
    return hits[:k]
