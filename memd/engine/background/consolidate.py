"""Consolidation: episodes that keep saying the same thing become one pattern.

Episodic (L2) memories pile up: each compaction of a session adds a summary, and the
promotion sweep lifts session memories into L2. When ``MIN_EPISODES`` or more of a
user's active episodes are alike (cosine with the group's first, oldest episode at least
``SIMILARITY``), they are folded into one **pattern**: a semantic (L3) memory, tagged
``pattern``, whose metadata lists its episodes. The episodes stay stored, each
superseded by the pattern, so retrieval offers the pattern in their place and the
context holds the recurring thing once.

A pattern's text is the helper's one sentence on what the episodes share when a helper
is on and the sentence passes the summary checks
(:func:`memd.engine.background.compact.check_summary` against the episodes' text: not
empty, shorter than them, no name or number they do not hold, about them); otherwise the
episode closest to the group's centroid, word for word,
flagged ``extractive``.

Importance follows outcomes, as far as memd observes any: the only outcome it sees is
an episode being used, retrieved into a compiled context (its access statistics). A
pattern starts at the highest importance among its episodes, plus ``OUTCOME_BOOST``
when most of them were used; at most 1.

A ``consolidate`` job per user (one queued at a time, by a fixed id) runs it; a
compaction that stores a summary queues it. The pattern, the episodes' supersession and
the job's deletion commit together, so a job run again after a crash does nothing; the
episodes it folded are superseded, so a later run never folds them again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memd.engine.background.compact import check_summary
from memd.engine.learning.write import content_hash
from memd.errors import ModelError
from memd.models.tokens import count_text
from memd.types import Memory, MemoryFilter, Provenance, Scope, Tier

if TYPE_CHECKING:
    from memd.backends.base import JobQueue, Store
    from memd.models.embedder import CachedEmbedder
    from memd.models.helper import ChatMessage, HelperModel

log = logging.getLogger(__name__)

JOB = "consolidate"
TAG = "pattern"
MIN_EPISODES = 5
SIMILARITY = 0.75
MAX_EPISODES = 500  # the newest active episodes a run looks at
OUTCOME_BOOST = 0.1
EPISODE_CHARS = 300  # the part of one episode the helper reads
MAX_TOKENS = 80

PROMPT = (
    "Notes:\n{text}\n\n"
    "These notes keep coming back. In one sentence, say what they have in common, using "
    'their own words. Answer in JSON: {{"pattern": "..."}}'
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pattern": {"type": "string", "minLength": 1, "maxLength": 300}},
    "required": ["pattern"], "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Group:
    """Alike episodes, oldest first, and the one closest to their centroid."""

    episodes: tuple[Memory, ...]
    central: Memory


def enqueue(store: JobQueue, user_id: str, now: float) -> bool:
    """Queue the user's ``consolidate`` job unless one is queued already."""
    return store.enqueue_job_once(f"{JOB}-{user_id}", JOB, {}, user_id, now)


def groups(episodes: Sequence[Memory], vectors: dict[str, np.ndarray]) -> list[Group]:
    """``episodes`` (with their ``vectors``) in groups of at least ``MIN_EPISODES`` alike
    ones: each episode, oldest first, not yet in a group gathers those not yet in one
    whose cosine with it reaches ``SIMILARITY``. Deterministic for the same input."""
    ordered = sorted((e for e in episodes if e.id in vectors),
                     key=lambda e: (e.created_at, e.id))
    taken: set[str] = set()
    out: list[Group] = []
    for seed in ordered:
        if seed.id in taken:
            continue
        v = vectors[seed.id]
        members = [e for e in ordered if e.id not in taken
                   and float(np.dot(v, vectors[e.id])) >= SIMILARITY]
        if len(members) < MIN_EPISODES:
            continue
        taken.update(e.id for e in members)
        centroid = np.mean([vectors[e.id] for e in members], axis=0)
        central = max(members, key=lambda e: (float(np.dot(centroid, vectors[e.id])),
                                              -e.created_at))
        out.append(Group(tuple(members), central))
    return out


def importance(group: Group) -> float:
    """The pattern's importance (see the module docstring)."""
    used = sum(1 for e in group.episodes if e.last_accessed_at is not None)
    boost = OUTCOME_BOOST if 2 * used > len(group.episodes) else 0.0
    return min(1.0, max(e.importance for e in group.episodes) + boost)


def prompt(group: Group) -> list[ChatMessage]:
    text = "\n".join(f"- {' '.join(e.text.split())[:EPISODE_CHARS]}" for e in group.episodes)
    return [{"role": "user", "content": PROMPT.format(text=text)}]


@dataclass(frozen=True, slots=True)
class PatternText:
    """A pattern's text; ``extractive`` when it is its central episode's, with why the
    helper's sentence was not kept (``rejected``) when one was asked."""

    text: str
    extractive: bool
    rejected: str | None = None


def pattern_text(helper: HelperModel | None, group: Group) -> PatternText:
    """The pattern's text (see the module docstring)."""
    if helper is None:
        return PatternText(group.central.text, True)
    try:
        answer = helper.complete(prompt(group), max_tokens=MAX_TOKENS, json_schema=SCHEMA)
        data = json.loads(answer)
    except (ModelError, ValueError):
        return PatternText(group.central.text, True, "model_error")
    text = data.get("pattern") if isinstance(data, dict) else None
    text = " ".join(text.split()) if isinstance(text, str) else ""
    source = "\n".join(e.text for e in group.episodes)
    reason = check_summary(text, source, sum(max(1, e.token_count) for e in group.episodes))
    if reason is not None:
        return PatternText(group.central.text, True, reason)
    return PatternText(text, False)


def consolidate_user(store: Store, embedder: CachedEmbedder, helper: HelperModel | None,
                     user_id: str, now: float, job_id: str | None = None) -> list[Memory]:
    """Fold the user's alike episodes into patterns (see the module docstring); the
    patterns stored. With ``job_id``, that job is deleted with them, and a run that
    finds it gone does nothing."""
    flt = MemoryFilter(tiers=(Tier.EPISODIC,), now=now)
    episodes = store.list_memories(user_id, flt, limit=MAX_EPISODES)
    vectors = store.get_memory_vectors(user_id, [e.id for e in episodes])
    found = groups(episodes, {k: np.asarray(v, dtype=np.float32) for k, v in vectors.items()})
    drafts = []
    for group in found:
        made = pattern_text(helper, group)
        drafts.append((group, made, embedder.embed([made.text])[0]))
    patterns: list[Memory] = []
    with store.transaction():
        if job_id is not None and not store.complete_job(job_id):
            return []
        for group, made, vector in drafts:
            current = [store.get_memory(user_id, e.id) for e in group.episodes]
            if any(c is None or not c.is_active or c.superseded_by for c in current):
                continue  # changed since it was read: the next run sees it anew
            pattern = store.insert_memory(_pattern(user_id, group, made, now), vector)
            for e in group.episodes:
                store.update_memory(user_id, e.id, superseded_by=pattern.id, updated_at=now)
            patterns.append(pattern)
            log.info("consolidated %d episodes of user %s into pattern %s%s",
                     len(group.episodes), user_id, pattern.id,
                     " (extractive)" if made.extractive else "")
    return patterns


def _pattern(user_id: str, group: Group, made: PatternText, now: float) -> Memory:
    workspaces = {e.workspace for e in group.episodes}
    metadata: dict[str, Any] = {"episodes": [e.id for e in group.episodes],
                                "count": len(group.episodes),
                                "extractive": made.extractive}
    if made.rejected is not None:
        metadata["rejected"] = made.rejected
    return Memory(
        id=uuid.uuid4().hex, user_id=user_id, text=made.text,
        content_hash=content_hash(made.text), token_count=count_text(made.text),
        created_at=now, updated_at=now,
        workspace=workspaces.pop() if len(workspaces) == 1 else None, tier=Tier.SEMANTIC,
        scope=Scope.GLOBAL, provenance=Provenance.SYSTEM_INFERRED,
        confidence=max(e.confidence for e in group.episodes), importance=importance(group),
        access_count=0, is_validated=True, tags=(TAG,),
        entities=tuple(dict.fromkeys(x for e in group.episodes for x in e.entities)),
        metadata=metadata,
    )
