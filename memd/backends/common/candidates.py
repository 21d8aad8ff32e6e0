"""Retrieval's candidate channels composed from single-channel Store methods, and the
access bookkeeping both backends apply in one statement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from memd.types import Found, Memory, MemoryFilter, Scope

if TYPE_CHECKING:
    from memd.backends.roles import AccessHit, MemoryStore, Vector


def compose_candidates(
    store: MemoryStore, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
    knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
    frequent_k: int = 0,
    keyword_hits: Callable[[], Sequence[tuple[Memory, float]]] | None = None,
) -> dict[str, Found]:
    """``Store.memory_candidates`` from the single-channel methods: a call per channel,
    then the vectors of the candidates the KNN did not find. The embedded backend uses
    it (its calls are in-process); a networked backend answers in one round trip and
    must agree with it. ``keyword_hits``: the keyword channel's answer, where the caller
    started it already (called after the vector channel)."""
    found: dict[str, Memory] = {}
    sims: dict[str, float] = {}
    keyword: dict[str, float] = {}
    by_entity: set[str] = set()
    for mem, sim in store.nearest_memories(user_id, vector, knn_k, flt):
        found[mem.id], sims[mem.id] = mem, sim
    if keyword_k > 0:
        hits = keyword_hits() if keyword_hits is not None else store.keyword_memories(
            user_id, query, keyword_k, flt)
        for mem, rel in hits:
            found.setdefault(mem.id, mem)
            keyword[mem.id] = rel
    if entities and entity_k > 0:
        for mem in store.memories_by_entities(user_id, entities, entity_k, flt):
            found.setdefault(mem.id, mem)
            by_entity.add(mem.id)
    if frequent_k > 0:
        for mem in store.list_memories(user_id, replace(flt, scope=Scope.GLOBAL),
                                       limit=frequent_k, order="access_count"):
            found.setdefault(mem.id, mem)
    missing = [mid for mid in found if mid not in sims]
    if missing:
        q = np.asarray(vector, dtype=np.float32)
        for mid, vec in store.get_memory_vectors(user_id, missing).items():
            sims[mid] = float(np.dot(q, np.asarray(vec, dtype=np.float32)))
    return {
        mid: Found(mem, sims.get(mid, 0.0), keyword.get(mid, 0.0), mid in by_entity)
        for mid, mem in found.items()
    }


def access_totals(hits: Sequence[AccessHit],
                  totals: dict[str, tuple[int, float]] | None = None
                  ) -> dict[str, tuple[int, float]]:
    """record_access's ``hits`` by memory: (accesses, relevance summed), each memory
    once, so that one statement can apply them all; added into ``totals`` when given
    (the job runner gathers a second's compiles so)."""
    if totals is None:
        totals = {}
    for mid, rel, *n in hits:
        count, summed = totals.get(mid, (0, 0.0))
        totals[mid] = (count + (n[0] if n else 1), summed + rel)
    return totals
