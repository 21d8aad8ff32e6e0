"""Planted facts: memd's retrieval on generated haystacks it was not tuned on.

    .venv/bin/python -m bench.bench_planted --split dev --users 20 --out planted_dev.json
    .venv/bin/python -m bench.bench_planted --split heldout --users 20   # kept aside
    .venv/bin/python -m bench.bench_planted --users 2 --embedder fake     # seconds: a smoke test

Each haystack of ``bench.planted`` (one user's dated sessions with planted facts, and the
questions about them) goes into a fresh memd store in a temporary folder, through the
public engine API: one memd session per haystack session, its user and assistant turns
appended in one call while the engine's clock reads the session's date, then the
background jobs (message embeddings, extraction) until none is left. The clock then
reads the questions' date (a day after the last session) and each question is asked:

- search: ``search(question, k=5, kinds=["message"])``; recall_any@5 (an evidence turn is
  among the five hits) and recall_all@5 (every evidence turn is), over hits of either
  role. ``user@5`` is LongMemEval's protocol (``bench.longmemeval``): the first five user
  turns among 50 hits.
- injected: the memory block the proxy would build for the question in a new chat
  (``Memd.memory_candidates`` with recall, ``memd.engine.block.inject.build``) within 1,000 and
  2,000 tokens, as ``bench.bench_recall`` builds it. An evidence turn is in the block as
  a recalled message, as the message that comes with a recalled answer, or as the source
  of a memory or fact in the block; any and all, as for search.
- baselines on the same user turns: ``bm25`` and ``dense`` (BM25 on whitespace tokens,
  and the cosine of the embedder's vectors; longmemeval.py's), top 5, any and all.

Figures per question kind (single-hop, multi-hop, temporal with its "now" and "before"
questions apart, open-domain), overall over these four, and for the ``verbatim`` control
(its question quotes its evidence; search below 1.0 there is a harness fault). JSON on
stdout and in ``--out``; a table and progress on stderr. ``--split heldout`` is kept
aside: it checks figures measured on ``dev``, and is never used to tune memd.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import memd
from bench.longmemeval import (
    DEFAULT_CACHE,
    RecordingEmbedder,
    SimClock,
    VectorCache,
    bm25_rank,
    dense_rank,
    document_precision,
)
from bench.output import emit
from bench.planted import ALL_KINDS, CONTROL, KINDS, SPLITS, Haystack, Question, TurnKey
from bench.planted import haystacks as make_haystacks
from memd.engine.block.inject import build
from memd.engine.memory import Memd
from memd.engine.retrieval.recall import RECALL_KIND, neighbour
from memd.models.embedder import Embedder, FakeEmbedder

BUDGETS: tuple[int, ...] = (1000, 2000)
K = 5
USER_FETCH = 50  # hits fetched for the user-turn measure, as longmemeval.py does
# MiniLM vectors of the haystacks' texts, beside longmemeval.py's (they share no text)
PLANTED_CACHE = DEFAULT_CACHE.with_name("planted-embeddings.sqlite")
METRICS: tuple[str, ...] = (
    "search_any@5", "search_all@5", "user_any@5", "user_all@5",
    *(f"block{b}_{m}" for b in BUDGETS for m in ("any", "all")),
    "bm25_any@5", "bm25_all@5", "dense_any@5", "dense_all@5",
)


@dataclass
class Loaded:
    """A haystack in a store: its user and where each of its turns went."""

    user: str
    turn_of: dict[str, TurnKey] = field(default_factory=dict)  # message id -> turn


def ingest(engine: Memd, hay: Haystack, clock: SimClock) -> Loaded:
    """One memd session per haystack session, in date order, each appended in one call at
    its date; then the background jobs, and the clock at the questions' date."""
    loaded = Loaded(f"u-{hay.id}")
    for s in sorted(hay.sessions, key=lambda s: s.date):
        clock.at = s.date
        session = engine.create_session(loaded.user, metadata={"planted_session": s.id})
        msgs = [{"role": t.role, "content": t.content,
                 "metadata": {"planted_session": s.id, "turn": i}}
                for i, t in enumerate(s.turns)]
        for i, msg in enumerate(engine.append(session.id, loaded.user, msgs)):
            loaded.turn_of[msg.id] = (s.id, i)
    clock.at = hay.date
    while engine.run_jobs():
        pass
    return loaded


@dataclass
class Baselines:
    """A haystack's user turns for the baselines: BM25 on whitespace tokens and the
    cosine of the embedder's vectors (longmemeval.py's ``bm25`` and ``dense``)."""

    emb: Embedder
    keys: list[TurnKey]
    texts: list[str]
    vectors: np.ndarray

    @classmethod
    def of(cls, hay: Haystack, emb: Embedder) -> Baselines:
        turns = [((s.id, i), t.content) for s in hay.sessions for i, t in enumerate(s.turns)
                 if t.role == "user"]
        texts = [t for _, t in turns]
        return cls(emb, [k for k, _ in turns], texts, emb.embed(texts))

    def ranked(self, question: str) -> tuple[list[TurnKey], list[TurnKey]]:
        """The top ``K`` user turns by BM25, and by cosine."""
        bm25 = bm25_rank(self.texts, question)[:K]
        dense = dense_rank(self.vectors, self.emb.embed([question])[0])[:K]
        return [self.keys[i] for i in bm25], [self.keys[i] for i in dense]


def searched(engine: Memd, loaded: Loaded, q: Question) -> tuple[list[TurnKey], list[TurnKey]]:
    """The turns of the top ``K`` message hits, and of the first ``K`` user hits among
    ``USER_FETCH``."""
    top = engine.search(q.text, loaded.user, k=K, kinds=["message"])
    wide = engine.search(q.text, loaded.user, k=USER_FETCH, kinds=["message"])
    users = [h for h in wide if h.metadata.get("role") == "user"][:K]
    return [loaded.turn_of[h.id] for h in top], [loaded.turn_of[h.id] for h in users]


def in_blocks(engine: Memd, loaded: Loaded, q: Question) -> dict[int, set[TurnKey]]:
    """Per budget, the evidence turns that reach the memory block built for ``q`` in a
    new chat (nothing sent before it)."""
    evidence = {mid: key for mid, key in loaded.turn_of.items() if key in q.evidence}
    facts, mems = engine.memory_candidates(loaded.user, q.text, sent_chains=())
    sources = {f.id: f.source_message_id for f in engine.store.get_facts(loaded.user)}
    out: dict[int, set[TurnKey]] = {}
    for budget in BUDGETS:
        found: set[TurnKey] = set()
        block = build(facts, mems, budget, "user", None)
        for c in block.memories if block is not None else ():
            if c.kind == RECALL_KIND:
                ids = [c.id]
                msg = engine.store.get_message(loaded.user, c.id)
                other = neighbour(engine.store, loaded.user, msg) if msg else None
                if other is not None:
                    ids.append(other.id)
            else:
                ids = [engine.get(c.id, loaded.user).provenance_message_id or ""]
            found.update(evidence[i] for i in ids if i in evidence)
        for c in block.facts if block is not None else ():
            source = sources.get(c.id)
            if source in evidence:
                found.add(evidence[source])
        out[budget] = found
    return out


def measure(engine: Memd, loaded: Loaded, q: Question, base: Baselines) -> dict[str, Any]:
    """One question's figures (each 0 or 1) and memd's top hits."""
    top, users = searched(engine, loaded, q)
    bm25, dense = base.ranked(q.text)
    want = set(q.evidence)
    row: dict[str, Any] = {"id": q.id, "kind": q.kind, "sub": q.sub}
    for name, ranked in (("search", top), ("user", users), ("bm25", bm25), ("dense", dense)):
        row[f"{name}_any@5"] = float(bool(want & set(ranked)))
        row[f"{name}_all@5"] = float(want <= set(ranked))
    for budget, found in in_blocks(engine, loaded, q).items():
        row[f"block{budget}_any"] = float(bool(found))
        row[f"block{budget}_all"] = float(found == want)
    row["top"] = [list(key) for key in top]
    return row


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The mean of each metric over ``rows``, and their number."""
    out: dict[str, float] = {"questions": len(rows)}
    for m in METRICS:
        out[m] = round(sum(r[m] for r in rows) / len(rows), 4) if rows else 0.0
    return out


def figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind, the temporal questions' two sides, and overall (the control left out)."""
    out = {kind: summarize([r for r in rows if r["kind"] == kind]) for kind in ALL_KINDS}
    for sub in ("now", "before"):
        out[f"temporal-{sub}"] = summarize(
            [r for r in rows if r["kind"] == "temporal" and r["sub"] == sub])
    out["overall"] = summarize([r for r in rows if r["kind"] in KINDS])
    return out


def table(by_kind: Mapping[str, Mapping[str, float]]) -> str:
    heads = ("", "n", "search any@5", "all@5", "user any@5", "all@5",
             *(f"block {b} any" for b in BUDGETS), *(f"block {b} all" for b in BUDGETS),
             "bm25 any@5", "dense any@5")
    lines = ["  ".join(f"{h:>15}" if i == 0 else f"{h:>12}" for i, h in enumerate(heads))]
    order = ("single-hop", "multi-hop", "temporal", "temporal-now", "temporal-before",
             "open-domain", "overall", CONTROL)
    for name in order:
        f = by_kind[name]
        cells = [f["questions"], f["search_any@5"], f["search_all@5"], f["user_any@5"],
                 f["user_all@5"], *(f[f"block{b}_any"] for b in BUDGETS),
                 *(f[f"block{b}_all"] for b in BUDGETS), f["bm25_any@5"], f["dense_any@5"]]
        lines.append("  ".join([f"{name:>15}", *(
            f"{c:>12.0f}" if i == 0 else f"{c:>12.3f}" for i, c in enumerate(cells))]))
    return "\n".join(lines)


def make_embedder(name: str, cache: Path | None) -> tuple[Embedder, RecordingEmbedder | None]:
    """The engine's embedder; MiniLM goes through longmemeval.py's recording embedder, so
    a haystack's texts are embedded in one batched call and kept in ``cache``."""
    if name == "fake":
        return FakeEmbedder(), None
    from memd.models.onnx_embedder import OnnxMiniLMEmbedder

    inner = OnnxMiniLMEmbedder(document_precision=document_precision())
    vectors = VectorCache(cache, inner.name, inner.dim) if cache is not None else None
    rec = RecordingEmbedder(inner, vectors)
    return rec, rec


def run(hays: Iterable[Haystack], embedder: str, cache: Path | None = None,
        progress: bool = True) -> list[dict[str, Any]]:
    """Every question's figures, each haystack in a fresh store."""
    emb, rec = make_embedder(embedder, cache)
    clock = SimClock()
    rows: list[dict[str, Any]] = []
    for hay in hays:
        t0 = time.perf_counter()
        if rec is not None:
            rec.forget()
            rec.prefetch([t.content for s in hay.sessions for t in s.turns])
        with tempfile.TemporaryDirectory(prefix="memd-planted-") as tmp:
            engine = memd.open(Path(tmp), embedder=emb, clock=clock)
            try:
                loaded = ingest(engine, hay, clock)
                base = Baselines.of(hay, emb)
                got = [measure(engine, loaded, q, base) for q in hay.questions]
            finally:
                engine.close()
        rows += got
        if progress:
            hits = sum(r["search_any@5"] for r in got if r["kind"] in KINDS)
            asked = sum(r["kind"] in KINDS for r in got)
            print(f"{hay.id}: {hits:.0f}/{asked} found by search@5 "
                  f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rows


def misses(hays: Sequence[Haystack], rows: Sequence[Mapping[str, Any]],
           limit: int = 40) -> list[dict[str, Any]]:
    """Questions whose evidence search did not return in its top 5: the question, the
    evidence and what came instead."""
    by_id = {q.id: (h, q) for h in hays for q in h.questions}
    out: list[dict[str, Any]] = []
    for r in rows:
        if r["search_any@5"] or len(out) >= limit:
            continue
        hay, q = by_id[r["id"]]
        out.append({"id": q.id, "kind": q.kind, "question": q.text, "planted": q.planted,
                    "top": [hay.turn((sid, i)).content[:160] for sid, i in r["top"][:3]]})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--split", default="dev", choices=SPLITS,
                    help="dev, or heldout (kept aside: never used for tuning)")
    ap.add_argument("--users", type=int, default=20, help="haystacks (one user each)")
    ap.add_argument("--sessions", type=int, default=30, help="sessions per haystack")
    ap.add_argument("--embedder", default="minilm-onnx", choices=["minilm-onnx", "fake"])
    ap.add_argument("--cache", type=Path, default=PLANTED_CACHE,
                    help=f"persistent embedding cache (default {PLANTED_CACHE})")
    ap.add_argument("--no-cache", action="store_true", help="embed every text afresh")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    hays = make_haystacks(args.split, args.users, sessions=args.sessions)
    rows = run(hays, args.embedder, None if args.no_cache else args.cache)
    by_kind = figures(rows)
    print(table(by_kind), file=sys.stderr)
    result: dict[str, Any] = {
        "split": args.split, "users": args.users, "sessions_per_user": args.sessions,
        "turns": sum(len(s.turns) for h in hays for s in h.sessions),
        "questions": len(rows), "embedder": args.embedder, "k": K,
        "budgets": list(BUDGETS),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "figures": by_kind,
        "misses": misses(hays, rows),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
