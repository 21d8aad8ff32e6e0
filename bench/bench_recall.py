"""Injected recall: how often the memory block the model receives holds the evidence.

    .venv/bin/python -m bench.bench_recall --limit 100 --out bench/figures/recall.json
    .venv/bin/python -m bench.bench_recall --quick        # 5 questions, fake embedder (CI)

On LongMemEval_S (``--data`` or ``$MEMD_BENCH_LONGMEMEVAL``), each question's haystack
sessions are ingested through the engine, one memd session each, as longmemeval.py does
(the same vectors: its persistent embedding cache). Then the memory block is built for the
question the way the proxy builds it for a new chat (``Memd.memory_candidates`` with
recall, ``memd.engine.block.inject.build``: facts, memories and past messages packed by value
per token) within a memory budget of 1,000 and of 2,000 tokens. A question counts when
one of its evidence turns reaches the block: as a recalled message, as the message that
comes with a recalled answer, or as the source of a memory or fact in the block. Beside
it, on the same questions, memd's search turn recall_any@5 (longmemeval.py's measure):
recall in the block is what the model gets, search recall what it could have got.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import memd
from bench.longmemeval import (
    DEFAULT_CACHE,
    Ingested,
    Question,
    RecordingEmbedder,
    SimClock,
    VectorCache,
    data_path,
    ingest,
    load_questions,
    make_embedder,
    memd_search,
)
from bench.output import emit
from memd.engine.block.inject import build
from memd.engine.retrieval.recall import RECALL_KIND, neighbour

BUDGETS = (1000, 2000)
SEARCH_K = 5


def in_block(engine: memd.Memd, ing: Ingested, q: Question, budget: int) -> bool:
    """Whether the block built for ``q`` within ``budget`` tokens holds an evidence turn."""
    evidence = {mid for mid, key in ing.by_message.items() if key in q.evidence_turns}
    facts, mems = engine.memory_candidates(ing.user_id, q.text, sent_chains=())
    block = build(facts, mems, budget, "user", None)
    if block is None:
        return False
    for c in block.memories:
        if c.kind == RECALL_KIND:
            if c.id in evidence:
                return True
            msg = engine.store.get_message(ing.user_id, c.id)
            other = neighbour(engine.store, ing.user_id, msg) if msg else None
            if other is not None and other.id in evidence:
                return True
        elif engine.get(c.id, ing.user_id).provenance_message_id in evidence:
            return True
    sources = {f.id: f.source_message_id for f in engine.store.get_facts(ing.user_id)}
    return any(sources.get(c.id) in evidence for c in block.facts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="LongMemEval_S .json(.gz)")
    ap.add_argument("--limit", type=int, default=100,
                    help="questions spread evenly over the file (all types)")
    ap.add_argument("--embedder", default="minilm-onnx", choices=["minilm-onnx", "fake"])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="persistent embedding cache, shared with longmemeval.py")
    ap.add_argument("--no-keyword", dest="keyword", action="store_false",
                    help="recall through the vector channel alone (recall_keyword off; "
                         "the engine's default is on)")
    ap.add_argument("--quick", action="store_true", help="= --limit 5 --embedder fake (CI)")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.embedder = 5, "fake"
    questions = load_questions(data_path(args.data), args.limit)
    inner = make_embedder(args.embedder)
    cache = VectorCache(args.cache, inner.name, inner.dim) if args.embedder != "fake" else None
    emb = RecordingEmbedder(inner, cache)
    clock = SimClock()
    hits: dict[str, list[bool]] = {str(b): [] for b in BUDGETS}
    search: list[bool] = []
    by_type: dict[str, Counter[str]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memd-recall-") as tmp:
        longest = max(len(t.content) for q in questions for s in q.sessions for t in s.turns)
        engine = memd.open(Path(tmp), embedder=emb, clock=clock,
                           max_text_chars=max(32_000, longest), recall_keyword=args.keyword)
        try:
            for n, q in enumerate(questions, 1):
                emb.forget()
                emb.prefetch([t.content for s in q.sessions for t in s.turns if t.content])
                clock.at = None
                ing = ingest(engine, q, clock, sim_time=True)
                found = memd_search(engine, q, ing, 50).ranked[:SEARCH_K]
                search.append(any(key in q.evidence_turns for key in found))
                counts = by_type.setdefault(q.type, Counter())
                counts["questions"] += 1
                counts["search"] += search[-1]
                for b in BUDGETS:
                    hits[str(b)].append(in_block(engine, ing, q, b))
                    counts[f"block_{b}"] += hits[str(b)][-1]
                print(f"{n}/{len(questions)} {q.type}: search@5 {search[-1]} block "
                      + " ".join(f"{b}:{hits[str(b)][-1]}" for b in BUDGETS),
                      file=sys.stderr, flush=True)
        finally:
            engine.close()

    def share(values: list[bool]) -> float:
        return round(sum(values) / max(len(values), 1), 4)

    result: dict[str, Any] = {
        "questions": len(questions), "embedder": args.embedder, "keyword": args.keyword,
        "block_recall": {b: share(v) for b, v in hits.items()},
        "search_recall_any_at_5": share(search),
        "by_type": {t: dict(c) for t, c in sorted(by_type.items())},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
