"""Why memd misses an evidence turn of a team's weeks (``bench.generalize``).

    PYTHONPATH=$PWD .venv/bin/python -m bench.diagnose_generalize --users 10 \
        --kind open-domain

For every question of the kind and each evidence turn not in memd's top 10 user turns:
its rank in memd's list (``search(question, k=50, kinds=["message"])``, user turns), in
dense MiniLM's and in BM25's; and what outranks it: the score part (similarity, keyword,
freshness, second round, ...) by which the user turns of memd's top 10 beat it most, on
average. A turn memd did not return at all is "absent"; one whose similarity part is
below every top-10 turn's is counted under "similarity" whatever else differs (dense
would not rank it either). Prints one line per miss and the counts by cause and by
template.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import memd
from bench.bench_generalize import FETCH, GEN_CACHE
from bench.bench_planted import Baselines, ingest, make_embedder
from bench.generalize import SPLITS, histories
from bench.longmemeval import SimClock, bm25_rank, dense_rank
from bench.planted import TurnKey
from memd.types import Hit

TOP = 10


def cause(evidence: Hit | None, above: Sequence[Hit]) -> str:
    """The score part by which the turns above ``evidence`` beat it most, on average."""
    if evidence is None:
        return "absent"
    sim = evidence.breakdown.get("similarity", 0.0)
    if all(h.breakdown.get("similarity", 0.0) > sim for h in above):
        return "similarity"
    parts = {p for h in above for p in h.breakdown} | set(evidence.breakdown)
    gap = {p: statistics.fmean(h.breakdown.get(p, 0.0) - evidence.breakdown.get(p, 0.0)
                               for h in above) for p in parts}
    return max(gap, key=lambda p: gap[p])


def place(ranked: Sequence[TurnKey], turn: TurnKey) -> int | str:
    """``turn``'s 1-based rank in ``ranked``, "-" when it is not there."""
    return ranked.index(turn) + 1 if turn in ranked else "-"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--kind", default="open-domain")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = ap.parse_args(argv)
    overrides = dict(item.partition("=")[::2] for item in args.set)
    emb, rec = make_embedder("minilm-onnx", GEN_CACHE)
    clock = SimClock()
    causes: Counter[str] = Counter()
    by_template: Counter[tuple[str, str]] = Counter()
    for hay in histories(SPLITS[0], args.users):
        if rec is not None:
            rec.forget()
            rec.prefetch([t.content for s in hay.sessions for t in s.turns]
                         + [q.text for q in hay.questions])
        with tempfile.TemporaryDirectory(prefix="memd-diagnose-") as tmp:
            engine = memd.open(Path(tmp), embedder=emb, clock=clock, **overrides)
            try:
                loaded = ingest(engine, hay, clock)
                base = Baselines.of(hay, emb)
                for q in (q for q in hay.questions if q.kind == args.kind):
                    hits = [h for h in engine.search(q.text, loaded.user, k=FETCH,
                                                     kinds=["message"])
                            if h.metadata.get("role") == "user"]
                    ranked = [loaded.turn_of[h.id] for h in hits]
                    bm25 = [base.keys[i] for i in bm25_rank(base.texts, q.text)]
                    dense = [base.keys[i] for i in
                             dense_rank(base.vectors, base.emb.embed([q.text])[0])]
                    for turn in q.evidence:
                        at = ranked.index(turn) if turn in ranked else None
                        if at is not None and at < TOP:
                            continue
                        ev = hits[at] if at is not None else None
                        why = cause(ev, hits[:TOP])
                        causes[why] += 1
                        by_template[(q.sub, why)] += 1
                        text = next(t.content for s in hay.sessions if s.id == turn[0]
                                    for i, t in enumerate(s.turns) if i == turn[1])
                        print(f"{hay.id} {q.sub:<10} memd {at + 1 if at is not None else '-':>3}"
                              f" dense {place(dense, turn):>3} bm25 {place(bm25, turn):>3}"
                              f" {why:<12} {text[:90]!r}")
            finally:
                engine.close()
    print("by cause:", dict(causes.most_common()))
    for (sub, why), n in sorted(by_template.items()):
        print(f"  {sub:<10} {why:<12} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
