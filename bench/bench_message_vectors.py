"""A large history's message vector search on SQLite: vec0, the exact in-memory matrix
and the hyperplane bits with float16 copies (memd.backends.sqlite.vectors.SignedVectors).

    .venv/bin/python -m bench.bench_message_vectors              # 100,000 vectors
    .venv/bin/python -m bench.bench_message_vectors --quick      # 5,000, fake vectors

The vectors are real MiniLM embeddings of conversation turns, read from LongMemEval's
embedding cache (``bench.longmemeval``'s ``--cache``, filled by its first run); the
queries are 200 other texts of that cache, none of them among the searched. Each way
answers the same queries for k = 10: latency per search (p50, p99) and, against the
exact search, the share of its 10 nearest found (recall@10). Without the cache
(``--quick``) the vectors are random ones around 200 topics. Writes ``--out`` (JSON).
Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from bench.bench_engine import pct
from bench.longmemeval import DEFAULT_CACHE
from memd.backends.sqlite.held import SignedVectors, UserVectors

K = 10
QUERIES = 200


def cached_vectors(cache: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` vectors and QUERIES others from the embedding cache."""
    with sqlite3.connect(cache) as db:
        rows = db.execute("SELECT vector FROM vectors LIMIT ?", (n + QUERIES,)).fetchall()
    if len(rows) < n + QUERIES:
        raise SystemExit(f"{cache} holds {len(rows)} vectors, {n + QUERIES} are needed")
    mat = np.frombuffer(b"".join(r[0] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    return mat[:n].copy(), mat[n:].copy()


def topic_vectors(n: int, dim: int = 384) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(200, dim))
    mat = (centers[rng.integers(0, 200, n + QUERIES)]
           + rng.normal(size=(n + QUERIES, dim)) * 0.8).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    return mat[:n], mat[n:]


def vec0(vectors: np.ndarray) -> Callable[[np.ndarray], list[str]]:
    """A KNN over one user's partition of a vec0 table, as memd's message_vec is."""
    db = apsw.Connection(str(Path(tempfile.mkdtemp()) / "v.db"))
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    db.execute("CREATE VIRTUAL TABLE v USING vec0(message_id TEXT PRIMARY KEY, "
               f"user_id TEXT PARTITION KEY, embedding float[{vectors.shape[1]}] "
               "distance_metric=cosine)")
    with db:
        db.executemany("INSERT INTO v VALUES (?, 'u', ?)",
                       ((f"m{i}", v.tobytes()) for i, v in enumerate(vectors)))

    def search(q: np.ndarray) -> list[str]:
        return [r[0] for r in db.execute(
            "SELECT message_id FROM v WHERE embedding MATCH ? AND k = ? AND user_id = 'u'",
            (q.tobytes(), K))]
    return search


def in_memory(held: UserVectors) -> Callable[[np.ndarray], list[str]]:
    def search(q: np.ndarray) -> list[str]:
        return [mid for mid, _ in held.knn(q, K, False, None)]
    return search


def measure(search: Callable[[np.ndarray], list[str]], queries: np.ndarray,
            exact: list[set[str]]) -> dict[str, Any]:
    times, found = [], []
    for q, want in zip(queries, exact, strict=True):
        t = time.perf_counter()
        got = search(q)
        times.append((time.perf_counter() - t) * 1000)
        found.append(len(want & set(got)) / K)
    return {"p50_ms": round(pct(times, 50), 2), "p99_ms": round(pct(times, 99), 2),
            f"recall_at_{K}": round(float(np.mean(found)), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=int, default=100_000)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="LongMemEval's embedding cache (MiniLM vectors)")
    ap.add_argument("--quick", action="store_true", help="5,000 random vectors (CI)")
    ap.add_argument("--out", type=Path, default=None, help="JSON results")
    args = ap.parse_args(argv)
    n = 5000 if args.quick else args.vectors
    if args.quick or not args.cache.exists():
        source, (vectors, queries) = "random, 200 topics", topic_vectors(n)
    else:
        source, (vectors, queries) = f"MiniLM, {args.cache.name}", cached_vectors(args.cache, n)
    ids = [f"m{i}" for i in range(n)]
    ways = {"exact (float32 matrix)": UserVectors.stacked(vectors.shape[1], ids, [""] * n,
                                                          [vectors]),
            "bits + float16 rerank": SignedVectors.stacked(vectors.shape[1], ids, [""] * n,
                                                            [vectors])}
    exact = [{mid for mid, _ in ways["exact (float32 matrix)"].knn(q, K, False, None)}
             for q in queries]
    out: dict[str, Any] = {"vectors": n, "source": source, "queries": len(queries), "k": K,
                           "ways": {}}
    searches: dict[str, Callable[[np.ndarray], list[str]]] = {"vec0": vec0(vectors)}
    searches.update((name, in_memory(held)) for name, held in ways.items())
    for name, search in searches.items():
        res = measure(search, queries, exact)
        if name in ways:
            res["mb"] = round(ways[name].nbytes / 2**20, 1)
        out["ways"][name] = res
        print(f"{name:24s} {res}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
