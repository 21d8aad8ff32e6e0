"""The multi-signal retrieval score (docs/design.md, "Retrieval score").

    score = w_sim · max(cos(q, m), 0)                      semantic relevance
          + w_kw  · bm25(q, m) / max bm25 over the query   keyword relevance (FTS5)
          + w_fr  · exp(−λ · Δt_hours)                     freshness, Δt since last access
          + w_acc · log(1 + a) / log(1 + a_max)            access frequency
          + w_au  · confidence · π(provenance)             authority
          + w_imp · importance                             importance
          + w_ent · [entities overlap the query's]         entity match

π is the provenance authority table (:data:`AUTHORITY`). Every hit carries the breakdown,
each signal already multiplied by its weight, so the parts add up to the score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memd.config import Weights
from memd.types import Provenance, quick_init

AUTHORITY: dict[Provenance, float] = {
    Provenance.USER_STATED: 1.0,
    Provenance.CORRECTION: 0.95,
    Provenance.INSTRUCTION: 0.90,
    Provenance.PREFERENCE: 0.85,
    Provenance.FACT: 0.80,
    Provenance.SUMMARY: 0.70,
    Provenance.TOOL_OUTPUT: 0.70,
    Provenance.SYSTEM_INFERRED: 0.60,
}


@quick_init
@dataclass(frozen=True, slots=True)
class Signals:
    similarity: float
    keyword: float = 0.0
    hours_since_access: float = 0.0
    access_count: int = 0
    max_access_count: int = 0
    confidence: float = 0.5
    provenance: Provenance = Provenance.SYSTEM_INFERRED
    importance: float = 0.5
    entity_match: bool = False


def score(s: Signals, w: Weights) -> tuple[float, dict[str, float]]:
    """The score and its weighted breakdown."""
    access = (
        math.log1p(s.access_count) / math.log1p(s.max_access_count)
        if s.max_access_count > 0 else 0.0
    )
    parts = {
        "similarity": w.similarity * max(s.similarity, 0.0),
        "keyword": w.keyword * s.keyword,
        "freshness": w.freshness * math.exp(-w.freshness_lambda * max(s.hours_since_access, 0)),
        "access": w.access * min(access, 1.0),
        "authority": w.authority * s.confidence * AUTHORITY[s.provenance],
        "importance": w.importance * s.importance,
        "entity": w.entity * (1.0 if s.entity_match else 0.0),
    }
    return sum(parts.values()), parts
