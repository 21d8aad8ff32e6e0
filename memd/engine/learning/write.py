"""The memory write path: deduplication, merge and conflict resolution (docs/design.md,
"Writing a memory").

Ingesting a memory, in one transaction:

1. normalize (NFC, whitespace) and hash the lowercased text (SHA-256);
2. exact duplicate in the same workspace: no insert, the existing memory's access_count
   goes up (a memory's first statement counts as its first access, so the same text
   twice is one memory with access_count 2);
3. near duplicate (cosine > ``dedup_threshold``, 0.92): merge. The more specific text
   (more distinct content words, then more digits) becomes the active memory; the other
   is kept, inactive, with ``superseded_by`` pointing at the winner. Importance is the
   max of both plus a 0.05 reinforcement (a repeated statement matters more);
4. conflict: a memory carrying a fact key (``fact:<category>/<key>`` tag) replaces the
   active memory with the same key when the fact gate lets its value through (a
   lower-confidence value never overwrites a higher one, unless it is an explicit
   correction); other near-identical statements of opposite polarity ("I like X" /
   "I don't like X", cosine > 0.80) are resolved by recency, then provenance authority,
   then confidence. The loser gets ``superseded_by``; nothing is deleted;
5. otherwise insert.

A duplicate or a merge of a conversation-bound memory (local scope: "answer in French
here") said again in another conversation, or said there as general, makes it a standing
one (:func:`promotion`): the user repeating an order across conversations means it.

Facts go through :func:`upsert_fact`: one active value per user+workspace+category+key;
the old value stays readable, inactive, with ``superseded_by``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from memd.backends.base import ForgottenStore, MemoryStore, Store
from memd.config import Settings
from memd.engine.retrieval.score import AUTHORITY
from memd.models.embedder import CachedEmbedder
from memd.models.tokens import count_text
from memd.types import Fact, Memory, MemoryFilter, Provenance, Scope, Tier

REINFORCEMENT = 0.05
# Provenances of standing orders: promoted, they join the procedural tier.
_STANDING = frozenset({Provenance.INSTRUCTION, Provenance.CORRECTION})
# The tag of a note's memory (memd.engine.learning.notes): its file decides its words, so this
# write path neither merges into it nor supersedes it.
NOTE_TAG = "memd:note"
CONFLICT_SIMILARITY = 0.80
_CONTENT_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'+#.-]*")
_NEGATION = re.compile(r"\b(?:not|never|no|don't|doesn't|didn't|dont|won't|can't|cannot|"
                       r"hate|dislike|avoid)\b", re.IGNORECASE)
_STOP = frozenset(
    "the a an and or but of to in on at for with is are was were be been "
    "being i me my we our you your it its this that these those user user's as by from".split()
)


def content_hash(text: str) -> str:
    """SHA-256 of the normalized, lowercased text (the exact-dedup key)."""
    return hashlib.sha256(text.lower().encode("utf-8")).hexdigest()


def forgotten_digest(source_hash: str, item: str) -> str:
    """What a forget leaves behind of one extracted item: SHA-256 over the content hash of
    the message it was extracted from and the item's words (``memory_item`` /
    ``fact_item``). Extraction skips an item whose digest is there, so the same message,
    stored again (a branch of its session, an import), never brings it back; the same
    thing said in a new message of other words is the user's new statement."""
    return hashlib.sha256(f"{source_hash}\x1f{item}".encode()).hexdigest()


def forgotten_items(store: ForgottenStore, user_id: str, source_hash: str | None,
                    items: Iterable[str]) -> set[str]:
    """Those of ``items`` (``memory_item`` / ``fact_item``) that the user made memd forget
    when they were extracted from a message whose content hash is ``source_hash``."""
    if source_hash is None:
        return set()
    by_digest = {forgotten_digest(source_hash, item): item for item in items}
    if not by_digest:
        return set()
    return {by_digest[d] for d in store.forgotten(user_id, list(by_digest))}


def memory_item(text: str) -> str:
    return "memory\x1f" + " ".join(text.lower().split())


def fact_item(category: str, key: str, value: str) -> str:
    return f"fact\x1f{category}\x1f{key}\x1f{' '.join(value.lower().split())}"


def specificity(text: str) -> tuple[int, int, int]:
    words = {w.lower() for w in _CONTENT_WORD.findall(text)} - _STOP
    return len(words), sum(c.isdigit() for c in text), len(text)


def _polarity(text: str) -> bool:
    return bool(_NEGATION.search(text))


def fact_tag(category: str, key: str) -> str:
    return f"fact:{category}/{key}"


@dataclass(frozen=True, slots=True)
class MemoryDraft:
    """A memory to ingest, validated by the caller."""

    user_id: str
    text: str
    workspace: str | None = None
    session_id: str | None = None
    tier: Tier = Tier.SEMANTIC
    scope: Scope = Scope.GLOBAL
    provenance: Provenance = Provenance.USER_STATED
    provenance_message_id: str | None = None
    confidence: float = 1.0
    importance: float = 0.5
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    expires_at: float | None = None
    # For a memory stating a keyed fact whose value changed: did the new value pass the
    # fact gate (True: it supersedes the old memory; False: the old one wins)? None when
    # the fact is new or restated unchanged: then plain dedup and merge apply.
    fact_accepted: bool | None = None


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What ingesting did: ``inserted``, ``duplicate``, ``merged`` or ``superseded``
    (this write replaced a conflicting memory) or ``rejected`` (kept, but the older
    memory won). ``memory`` is the active memory that now holds the information."""

    action: str
    memory: Memory
    replaced: tuple[Memory, ...] = ()


def _wins(new: MemoryDraft, new_time: float, old: Memory) -> bool:
    """Conflict order: recency, then provenance authority, then confidence."""
    if new_time != old.created_at:
        return new_time > old.created_at
    a_new, a_old = AUTHORITY[new.provenance], AUTHORITY[old.provenance]
    if a_new != a_old:
        return a_new > a_old
    return new.confidence >= old.confidence


def ingest(
    store: Store, embedder: CachedEmbedder, settings: Settings, draft: MemoryDraft, now: float
) -> WriteResult:
    """Ingest one memory (see the module docstring). ``draft.text`` is already normal."""
    chash = content_hash(draft.text)
    with store.transaction():
        existing = store.find_by_hash(draft.user_id, draft.workspace, chash)
        if existing is not None and NOTE_TAG not in existing.tags:
            bumped = store.update_memory(
                draft.user_id, existing.id, access_count=existing.access_count + 1,
                importance=min(1.0, max(existing.importance, draft.importance)),
                updated_at=now, **promotion(existing, draft),
            )
            return WriteResult("duplicate", bumped)
    vector = embedder.embed([draft.text])[0]
    with store.transaction():
        flt = MemoryFilter(workspaces=(draft.workspace or "",), now=now)
        fact_tags = [t for t in draft.tags if t.startswith("fact:")]
        if fact_tags and draft.fact_accepted is not None:
            rivals = store.list_memories(
                draft.user_id, replace(flt, tags=(fact_tags[0],)), limit=10
            )
            if rivals:
                return _resolve_fact_conflict(store, draft, chash, vector, rivals, now)
        near = [(m, sim) for m, sim in store.nearest_memories(draft.user_id, vector, 3, flt)
                if NOTE_TAG not in m.tags]
        if near:
            top, sim = near[0]
            if _polarity(top.text) != _polarity(draft.text) and sim > CONFLICT_SIMILARITY:
                return _resolve_conflict(store, draft, chash, vector, top, now)
            if sim > settings.dedup_threshold:
                return _merge(store, draft, chash, vector, top, now)
        memory = store.insert_memory(_build(draft, chash, now), vector)
        return WriteResult("inserted", memory)


def promotion(old: Memory, draft: MemoryDraft) -> dict[str, Any]:
    """How a conversation-bound memory changes when it is said again: said in another
    conversation, or said there as general, it becomes a standing one (global scope,
    procedural tier); otherwise nothing changes."""
    if old.scope != Scope.LOCAL:
        return {}
    if draft.scope == Scope.GLOBAL or draft.session_id != old.session_id:
        return {"scope": Scope.GLOBAL, "tier": max(old.tier, draft.tier, Tier.PROCEDURAL)
                if old.provenance in _STANDING else max(old.tier, draft.tier)}
    return {}


def _standing_as(old: Memory) -> dict[str, Any]:
    """A more specific text that replaces a standing memory stands as it did."""
    return {"scope": old.scope, "tier": old.tier} if old.scope == Scope.GLOBAL else {}


def _build(draft: MemoryDraft, chash: str, now: float, **overrides: Any) -> Memory:
    fields: dict[str, Any] = dict(
        id=uuid.uuid4().hex, user_id=draft.user_id, text=draft.text, content_hash=chash,
        token_count=count_text(draft.text), created_at=now, updated_at=now,
        workspace=draft.workspace, session_id=draft.session_id, tier=draft.tier,
        scope=draft.scope, provenance=draft.provenance,
        provenance_message_id=draft.provenance_message_id, confidence=draft.confidence,
        importance=draft.importance, access_count=1, expires_at=draft.expires_at,
        is_validated=draft.provenance != Provenance.SYSTEM_INFERRED, tags=draft.tags,
        entities=draft.entities, metadata=dict(draft.metadata),
    )
    fields.update(overrides)
    return Memory(**fields)


def _merge(
    store: MemoryStore, draft: MemoryDraft, chash: str, vector: np.ndarray, old: Memory, now: float
) -> WriteResult:
    importance = min(1.0, max(old.importance, draft.importance) + REINFORCEMENT)
    if specificity(draft.text) > specificity(old.text):
        new = store.insert_memory(
            _build(draft, chash, now, **(promotion(old, draft) or _standing_as(old)),
                   access_count=old.access_count + 1, importance=importance,
                   confidence=max(old.confidence, draft.confidence),
                   tags=tuple(dict.fromkeys(old.tags + draft.tags)),
                   entities=tuple(dict.fromkeys(old.entities + draft.entities))),
            vector,
        )
        loser = store.update_memory(
            old.user_id, old.id, is_active=False, superseded_by=new.id, updated_at=now
        )
        return WriteResult("merged", new, (loser,))
    kept = store.update_memory(
        old.user_id, old.id, access_count=old.access_count + 1, importance=importance,
        updated_at=now, **promotion(old, draft),
    )
    store.insert_memory(
        _build(draft, chash, now, is_active=False, superseded_by=old.id, access_count=0),
        vector,
    )
    return WriteResult("merged", kept)


def _supersede(
    store: MemoryStore, draft: MemoryDraft, chash: str, vector: np.ndarray, losers: list[Memory],
    now: float,
) -> WriteResult:
    new = store.insert_memory(_build(draft, chash, now), vector)
    replaced = tuple(
        store.update_memory(m.user_id, m.id, is_active=False, superseded_by=new.id,
                            updated_at=now)
        for m in losers
    )
    return WriteResult("superseded", new, replaced)


def _reject(
    store: MemoryStore, draft: MemoryDraft, chash: str, vector: np.ndarray, winner: Memory,
    now: float,
) -> WriteResult:
    store.insert_memory(
        _build(draft, chash, now, is_active=False, superseded_by=winner.id, access_count=0),
        vector,
    )
    return WriteResult("rejected", winner)


def _resolve_fact_conflict(
    store: Store, draft: MemoryDraft, chash: str, vector: np.ndarray, rivals: list[Memory],
    now: float,
) -> WriteResult:
    if draft.fact_accepted is False:
        return _reject(store, draft, chash, vector, rivals[0], now)
    return _supersede(store, draft, chash, vector, rivals, now)


def _resolve_conflict(
    store: Store, draft: MemoryDraft, chash: str, vector: np.ndarray, old: Memory, now: float
) -> WriteResult:
    if _wins(draft, now, old):
        return _supersede(store, draft, chash, vector, [old], now)
    return _reject(store, draft, chash, vector, old, now)


@dataclass(frozen=True, slots=True)
class FactResult:
    """``inserted`` (new key), ``updated`` (new value replaced the old one),
    ``unchanged`` (same value; confidence raised if higher) or ``rejected`` (the stored
    value has higher confidence and this was not a correction)."""

    action: str
    fact: Fact
    previous: Fact | None = None


def upsert_fact(
    store: Store, user_id: str, workspace: str | None, category: str, key: str, value: str,
    confidence: float, importance: float, now: float, *, is_correction: bool = False,
    source_message_id: str | None = None, metadata: dict[str, Any] | None = None,
) -> FactResult:
    """The confidence-gated upsert; history is kept, never overwritten in place."""
    with store.transaction():
        current = store.get_facts(
            user_id, workspaces=(workspace or "",), category=category, key=key
        )
        old = current[0] if current else None
        if old is not None and old.value.casefold() == value.casefold():
            return FactResult("unchanged", old)
        if old is not None and confidence < old.confidence and not is_correction:
            return FactResult("rejected", old)
        fact = Fact(
            id=uuid.uuid4().hex, user_id=user_id, category=category, key=key, value=value,
            confidence=confidence, importance=importance, created_at=now, updated_at=now,
            workspace=workspace, source_message_id=source_message_id,
            metadata=dict(metadata or {}),
        )
        if old is not None:
            store.supersede_fact(user_id, old.id, fact.id, now)
        store.insert_fact(fact)
        return FactResult("updated" if old else "inserted", fact, old)
