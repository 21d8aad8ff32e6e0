"""A team's weeks (``bench.generalize``): turn-level evidence recall@1/5/10 per question
kind for memd's search, BM25 and dense MiniLM in the same run, and search latency.

    nice -n 19 .venv/bin/python -m bench.bench_generalize --users 20 --out gen_dev.json
    .venv/bin/python -m bench.bench_generalize --quick --embedder fake   # seconds: CI
    .venv/bin/python -m bench.bench_generalize --aside   # once, at the end of the work
    .venv/bin/python -m bench.bench_generalize --fresh   # once, after the aside part

Each user's history goes into a fresh memd store as ``bench.bench_planted`` loads its
haystacks (one memd session per session, appended at its date, then the jobs); the
questions are asked a day after the last session. Rankings are over user turns (the
evidence is always a user turn), as in ``bench.longmemeval``: memd's
``search(question, k=50, kinds=["message"])`` with assistant hits dropped; ``bm25``
(rank_bm25's BM25Okapi on whitespace tokens) and ``dense`` (cosine of the same
embedder's vectors) over the same turns. ``recall@k`` is the share of a question's
evidence turns among the top k, ``any@k`` whether any is; means per kind and overall,
and per question template (``families``).
``--against NAME=VALUE`` adds a fourth ranking, ``before``: memd's search of the same store
with those settings (retrieval's live settings, swapped in for that search only), so that
the search a change is judged against runs in the same run, on the same stores and
questions (the aside part is read once, with both rankings).
``search_p50_ms`` times ``search(question, k=10, kinds=["message"])``; with MiniLM the
question's vector is already in the recording embedder's cache (it is prefetched with the
history's texts), so the figure is the search without the query embedding.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import memd
from bench.bench_planted import Baselines, Loaded, ingest, make_embedder
from bench.generalize import KINDS, SPLITS, histories
from bench.longmemeval import DEFAULT_CACHE, SimClock, bm25_rank, dense_rank
from bench.output import emit
from bench.planted import Haystack, Question, TurnKey
from memd.config import Settings, load_settings
from memd.engine.memory import Memd
from memd.server.watch import LIVE_KEYS

KS: tuple[int, ...] = (1, 5, 10)
FETCH = 50  # hits fetched before the assistant turns are dropped
METHODS: tuple[str, ...] = ("memd", "bm25", "dense", "before")
GEN_CACHE = DEFAULT_CACHE.with_name("generalize-embeddings.sqlite")
ASIDE_WARNING = ("WARNING: the {} part is to be run ONCE, at the end of the methods "
                 "work, to check figures measured on dev; never tune on what it shows.")


def memd_ranked(engine: Memd, loaded: Loaded, q: Question) -> list[TurnKey]:
    hits = engine.search(q.text, loaded.user, k=FETCH, kinds=["message"])
    return [loaded.turn_of[h.id] for h in hits if h.metadata.get("role") == "user"]


def before_ranked(engine: Memd, loaded: Loaded, q: Question, before: Settings,
                  ) -> list[TurnKey]:
    """memd's ranking with the live settings of ``before`` for this one search (all of
    them, so that a preset brings its weights, as a live config change does)."""
    live = engine.settings
    engine.settings = replace(live, **{n: getattr(before, n) for n in LIVE_KEYS})
    try:
        return memd_ranked(engine, loaded, q)
    finally:
        engine.settings = live


def baseline_ranked(base: Baselines, q: Question) -> tuple[list[TurnKey], list[TurnKey]]:
    bm25 = bm25_rank(base.texts, q.text)[:max(KS)]
    dense = dense_rank(base.vectors, base.emb.embed([q.text])[0])[:max(KS)]
    return [base.keys[i] for i in bm25], [base.keys[i] for i in dense]


def scores(ranked: Sequence[TurnKey], evidence: Sequence[TurnKey]) -> dict[str, float]:
    want = set(evidence)
    out: dict[str, float] = {}
    for k in KS:
        got = want & set(ranked[:k])
        out[f"recall@{k}"] = len(got) / len(want)
        out[f"any@{k}"] = float(bool(got))
    return out


def timed_search(engine: Memd, loaded: Loaded, q: Question) -> float:
    t0 = time.perf_counter()
    engine.search(q.text, loaded.user, k=max(KS), kinds=["message"])
    return (time.perf_counter() - t0) * 1000


def run(hays: Iterable[Haystack], embedder: str, cache: Path | None,
        progress: bool = True, settings: Mapping[str, str] | None = None,
        against: Mapping[str, str] | None = None,
        ) -> tuple[list[dict[str, Any]], list[float]]:
    """Every question's scores per method, and each search's milliseconds (``settings``:
    memd settings to open each store with, as ``--set`` gives them; ``against``: the
    settings of the ``before`` ranking, on top of ``settings``)."""
    emb, rec = make_embedder(embedder, cache)
    clock = SimClock()
    rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    for hay in hays:
        t0 = time.perf_counter()
        if rec is not None:
            rec.forget()
            rec.prefetch([t.content for s in hay.sessions for t in s.turns]
                         + [q.text for q in hay.questions])
        with tempfile.TemporaryDirectory(prefix="memd-generalize-") as tmp:
            engine = memd.open(Path(tmp), embedder=emb, clock=clock, **(settings or {}))
            before = (load_settings(data_dir=Path(tmp), **{**(settings or {}), **against})
                      if against else None)
            try:
                loaded = ingest(engine, hay, clock)
                base = Baselines.of(hay, emb)
                for q in hay.questions:
                    bm25, dense = baseline_ranked(base, q)
                    row: dict[str, Any] = {"id": q.id, "kind": q.kind, "sub": q.sub}
                    for name, ranked in (("memd", memd_ranked(engine, loaded, q)),
                                         ("bm25", bm25), ("dense", dense)):
                        row[name] = scores(ranked, q.evidence)
                    if before is not None:
                        row["before"] = scores(before_ranked(engine, loaded, q, before),
                                               q.evidence)
                    latencies.append(timed_search(engine, loaded, q))
                    rows.append(row)
            finally:
                engine.close()
        if progress:
            print(f"{hay.id}: {len(hay.questions)} questions "
                  f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rows, latencies


def figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per kind and overall, per method, the mean of each score."""
    return _means({**{kind: [r for r in rows if r["kind"] == kind] for kind in KINDS},
                   "overall": list(rows)})


def families(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """The same per question template ("multi-hop/ticket"), so that a method built on one
    template shows whether it helps the others of its kind."""
    names = sorted({f"{r['kind']}/{r['sub']}" for r in rows if r["sub"]},
                   key=lambda n: (KINDS.index(n.split("/")[0]), n))
    return _means({n: [r for r in rows if f"{r['kind']}/{r['sub']}" == n] for n in names})


def _means(groups: Mapping[str, Sequence[Mapping[str, Any]]],
           ) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    ran = _ran(r for g in groups.values() for r in g)
    for name, group in groups.items():
        out[name] = {m: {key: round(statistics.fmean(r[m][key] for r in group), 4)
                         if group else 0.0 for key in scores([], [("", 0)])}
                     for m in ran}
        out[name]["n"] = {"questions": float(len(group))}
    return out


def _ran(rows: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The methods the rows were scored by (``before`` only with ``--against``)."""
    first = next(iter(rows), None)
    if first is None:
        return METHODS[:3]
    return tuple(m for m in METHODS if m in first)


def table(by_kind: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    ran = [m for m in METHODS if all(m in f for f in by_kind.values())]
    cols = [f"{m} r@{k}" for m in ran for k in KS]
    lines = [f"{'':>22} {'n':>4} " + " ".join(f"{c:>10}" for c in cols)]
    for name, f in by_kind.items():
        cells = [f[m][f"recall@{k}"] for m in ran for k in KS]
        lines.append(f"{name:>22} {f['n']['questions']:>4.0f} "
                     + " ".join(f"{c:>10.3f}" for c in cells))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--users", type=int, default=20, help="users of the part (one store each)")
    ap.add_argument("--sessions", type=int, default=30, help="sessions per user")
    held = ap.add_mutually_exclusive_group()
    held.add_argument("--aside", action="store_true",
                      help="the aside part instead of dev: run it once, at the very end")
    held.add_argument("--fresh", action="store_true",
                      help="the fresh part (users neither dev nor aside), for a check once "
                           "the aside part has been read: run it once, at the very end")
    ap.add_argument("--quick", action="store_true", help="2 users of 14 sessions (CI)")
    ap.add_argument("--embedder", default="minilm-onnx", choices=["minilm-onnx", "fake"])
    ap.add_argument("--cache", type=Path, default=GEN_CACHE,
                    help=f"persistent embedding cache (default {GEN_CACHE})")
    ap.add_argument("--no-cache", action="store_true", help="embed every text afresh")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a memd setting for the stores (repeatable), e.g. to compare "
                         "with a retrieval method off: --set search_second_round=false")
    ap.add_argument("--against", action="append", default=[], metavar="NAME=VALUE",
                    help="also rank each question by memd's search with this retrieval "
                         "setting (repeatable; a live setting), as the 'before' method of "
                         "the same run, e.g. --against search_passages=false")
    args = ap.parse_args(argv)
    overrides = dict(item.partition("=")[::2] for item in args.set)
    against = dict(item.partition("=")[::2] for item in args.against)
    if any(not name or not value for name, value in (*overrides.items(), *against.items())):
        ap.error("--set and --against take NAME=VALUE")
    if not set(against) <= LIVE_KEYS:
        ap.error(f"--against takes live settings, read at each search; not "
                 f"{', '.join(sorted(set(against) - LIVE_KEYS))}")
    split = SPLITS[1] if args.aside else SPLITS[2] if args.fresh else SPLITS[0]
    if split != SPLITS[0]:
        print(ASIDE_WARNING.format(split), file=sys.stderr, flush=True)
    users, sessions = (2, 14) if args.quick else (args.users, args.sessions)
    started = time.perf_counter()
    hays = histories(split, users, sessions=sessions)
    rows, latencies = run(hays, args.embedder, None if args.no_cache else args.cache,
                          settings=overrides, against=against)
    by_kind = figures(rows)
    by_family = families(rows)
    print(table(by_kind), file=sys.stderr)
    print(table(by_family), file=sys.stderr)
    result: dict[str, Any] = {
        "split": split, "users": users, "sessions_per_user": sessions,
        "turns": sum(len(s.turns) for h in hays for s in h.sessions),
        "questions": len(rows), "embedder": args.embedder, "ks": list(KS),
        "settings": overrides, "against": against,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "figures": by_kind,
        "families": by_family,
        "search_p50_ms": round(statistics.median(latencies), 2) if latencies else 0.0,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
