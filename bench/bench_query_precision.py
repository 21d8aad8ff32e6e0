"""Query precision: the int8 query model against the exact one, in speed and in recall.

    .venv/bin/python -m bench.bench_query_precision --limit 100
    .venv/bin/python -m bench.bench_query_precision --quick      # CI: 5 questions

memd embeds stored texts with the exact (float) MiniLM and search queries with an int8
copy of it (``OnnxMiniLMEmbedder.embed_queries``, ``query_precision`` setting). Two
figures decide whether that is right:

- speed: one query of 8, 16, 32, 64 and 128 tokens on each model (median of 30 runs);
- quality: on LongMemEval_S (``--data`` or ``$MEMD_BENCH_LONGMEMEVAL``), each question's
  user turns embedded exactly, ranked by cosine with the question embedded by each
  model: turn recall_any@5 and @10 for both, how many of the top 10 the two share, and
  the cosines between the two query vectors.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.longmemeval import (
    DATA_ENV,
    DEFAULT_CACHE,
    RecordingEmbedder,
    VectorCache,
    data_path,
    dense_rank,
    load_questions,
    recall_any,
)
from bench.output import emit
from memd.engine.validate import EMBED_CHARS, QUERY_EMBED_CHARS, excerpt
from memd.models.onnx_embedder import OnnxMiniLMEmbedder


def speed(model: OnnxMiniLMEmbedder) -> dict[str, dict[str, float]]:
    """Median milliseconds of one query of n tokens on each model."""
    model.embed_queries(["load both models"])
    out: dict[str, dict[str, float]] = {}
    for n in (8, 16, 32, 64, 128):
        text = " ".join(["memory"] * (n - 2))  # one word piece each, plus [CLS] and [SEP]
        row = {}
        for name, run in (("float32", model.embed), ("int8", model.embed_queries)):
            times = []
            for _ in range(30):
                t = time.perf_counter()
                run([text])
                times.append((time.perf_counter() - t) * 1000)
            row[name] = round(statistics.median(times), 2)
        out[str(n)] = row
    return out


def quality(model: OnnxMiniLMEmbedder, data: Path, limit: int,
            cache: Path | None) -> dict[str, Any]:
    questions = load_questions(data, limit)
    docs_model = RecordingEmbedder(model, VectorCache(cache, model.name, model.dim)
                                   if cache else None)
    hits: dict[str, dict[int, list[float]]] = {"float32": {5: [], 10: []},
                                               "int8": {5: [], 10: []}}
    shared, cosines = [], []
    for q in questions:
        turns = q.user_turns()
        keys = [k for k, _ in turns]
        docs = docs_model.embed([excerpt(t, EMBED_CHARS) for _, t in turns])
        query = excerpt(q.text, QUERY_EMBED_CHARS)
        vectors = {"float32": model.embed([query])[0], "int8": model.embed_queries([query])[0]}
        tops = {}
        for name, vec in vectors.items():
            ranked = [keys[i] for i in dense_rank(docs, vec)]
            tops[name] = set(ranked[:10])
            for k in (5, 10):
                hits[name][k].append(recall_any(ranked, q.evidence_turns, k))
        shared.append(len(tops["float32"] & tops["int8"]) / 10)
        cosines.append(float(np.dot(vectors["float32"], vectors["int8"])))
    return {
        "questions": len(questions),
        "recall_any": {name: {f"@{k}": round(sum(v) / len(v), 4) for k, v in by_k.items()}
                       for name, by_k in hits.items()},
        "top10_shared": round(sum(shared) / len(shared), 4),
        "query_cosine": {"min": round(min(cosines), 4),
                         "median": round(statistics.median(cosines), 4)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help=f"LongMemEval_S .json(.gz) (default: ${DATA_ENV})")
    ap.add_argument("--limit", type=int, default=100, help="LongMemEval_S questions")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="persistent embedding cache, shared with longmemeval.py")
    ap.add_argument("--quick", action="store_true", help="5 questions, no cache (CI)")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.cache = 5, None
    data = data_path(args.data)  # before the model loads: a missing file fails at once
    model = OnnxMiniLMEmbedder()
    result = {"speed_ms": speed(model),
              "quality": quality(model, data, args.limit, args.cache)}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
