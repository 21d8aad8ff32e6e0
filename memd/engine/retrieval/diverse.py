"""The first messages of a ranking chosen so that they do not all say the same thing.

A question that asks for a judgement ("would the others be comfortable if I wrote the
new parser in Rust?") needs several remarks on different sides of it (the team's
background, the ramp-up it can afford, why it picked Go), and a question about one
remark needs it beside whatever else comes close. A ranking by the score alone fills its
first places with messages that are close to the question and to each other (five
remarks about parsers), and the second side of the answer comes below them. Maximal
marginal relevance picks the first ``POOL`` messages one at a time, each the best by its
score less ``PENALTY`` times its greatest cosine with a message picked before it (the
message vectors come from the embedder's persistent cache; a message without one is
judged by its score alone). A message the second round raised
(:mod:`memd.engine.retrieval.rounds`, a ``second_round`` part) is the second link of a
chain that shares words with the first on purpose, so it is not penalised. The pool
keeps its scores, handed out again in the new order, so what is below it and the other
kinds of hit keep their places; a moved message's breakdown says by how much
(``diverse``). Measured on the generated team histories and LongMemEval_S
(bench/README.md, "A team's weeks").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memd.models.embedder import CachedEmbedder
from memd.types import Message, ScoredMessages

#: How many of the first messages are chosen again.
POOL = 30
#: How much a message's greatest cosine with those chosen before it costs its score.
PENALTY = 0.1


def diversified(scored: Sequence[tuple[Message, float, dict[str, float]]],
                vectors: Sequence[np.ndarray | None], pool: int = POOL,
                penalty: float = PENALTY) -> ScoredMessages:
    """``scored`` (best first) with its first ``pool`` messages in the order of maximal
    marginal relevance (``vectors``: the vector of each of them, or None), their scores
    handed out again in that order; the rest as it was."""
    top = list(scored[:pool])
    places = sorted((total for _, total, _ in top), reverse=True)
    left = list(range(len(top)))
    picked: list[np.ndarray] = []
    order: list[int] = []
    while left:
        def value(i: int) -> float:
            vec, parts = vectors[i], top[i][2]
            if vec is None or not picked or "second_round" in parts:
                return top[i][1]
            return top[i][1] - penalty * max(float(np.dot(vec, p)) for p in picked)

        best = max(left, key=lambda i: (value(i), -i))
        left.remove(best)
        order.append(best)
        vec = vectors[best]
        if vec is not None:
            picked.append(vec)
    out: ScoredMessages = []
    for i, place in zip(order, places, strict=True):
        msg, total, parts = top[i]
        moved = {**parts, "diverse": parts.get("diverse", 0.0) + place - total}
        out.append((msg, place, moved if place != total else parts))
    return out + list(scored[pool:])


def diverse(scored: Sequence[tuple[Message, float, dict[str, float]]],
            embedder: CachedEmbedder, pool: int = POOL, penalty: float = PENALTY) -> ScoredMessages:
    """:func:`diversified` with the cached vectors of ``embedder`` (none computed here)."""
    vectors = embedder.cached([m.safe_text or "" for m, _, _ in scored[:pool]])
    return diversified(scored, vectors, pool, penalty)
