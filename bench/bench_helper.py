"""The helper model's figures: LLM extraction on LongMemEval_S user turns, and the chat
path's latency while the job worker runs the helper.

    .venv/bin/python -m bench.bench_helper                # 100 turns, 60 chat calls
    .venv/bin/python -m bench.bench_helper --quick        # CI: 8 turns, 6 calls

Needs the helper extra (llama.cpp and the bundled SmolLM2-135M-Instruct) and LongMemEval_S
(``--data`` or ``$MEMD_BENCH_LONGMEMEVAL``).

Three parts, in one run:

- **Extraction.** The first ``--turns`` user turns of the first questions' haystack
  sessions go through what a stored user message goes through: sanitized, the client's
  own text dropped (``user_words``), the rules' extraction, and, for a turn the helper is
  asked about (``worth_asking``), :func:`memd.engine.learning.extract.llm.llm_extract` with the
  real model, as the ``llm_extract`` job runs it. Figures: turns per second over all
  turns and over the asked ones (the helper's time only), facts kept per 100 turns (the
  helper's and the rules'), the items the model proposed and how many of them were
  grounded in the turn (the grounding rate: grounded / proposed), the other rejections
  by reason, and the turns whose extraction failed twice (counted, the rules' results
  stand).
- **Compaction.** ``--sessions`` haystack sessions of the same questions (those of at
  least 12 turns) are stored whole, and each is compacted once as its ``compact`` job
  does (:func:`memd.engine.background.compact.compact_session`, the real model summarizing, the
  newest ``KEEP_TURNS`` turns kept). Figures: the compression ratio (the window's
  tokens over its summary's) of each, the share of summaries the checks rejected for
  an extractive one (and why), seconds per compaction.
- **Chat latency with the worker busy.** memd (fake embedder off: the real MiniLM, as
  the daemon runs) serves one-message chats against an upstream that answers at once;
  ``--calls`` calls are timed with the job worker idle, then the same number while the
  worker runs ``llm_extract`` jobs on the real model (queued by storing the turns above
  in another session), alternating so both see the same machine. The helper runs on
  the worker's thread; the chat path must not wait for it. Figures: p50/p95/p99 of each
  and how many helper jobs ran during the busy calls.

Not a test: it prints figures (bench/README.md keeps them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

import memd
from bench.bench_proxy import UPSTREAM, serve, summary
from bench.longmemeval import data_path, load_questions
from bench.output import emit
from memd.config import load_settings
from memd.engine.learning.extract import extract
from memd.engine.learning.extract.llm import (
    ExtractionFailed,
    helper_from_settings,
    llm_extract,
    worth_asking,
)
from memd.engine.learning.privacy import make_sanitizer
from memd.engine.learning.templates import user_words
from memd.server.app import create_app

KEEP_TURNS = 4
QUESTIONS = ("How should I configure the deploy?", "What is a good cache size?",
             "Which test runner do you suggest?", "How do I rotate logs?")


def user_turns(path: Path, n: int) -> list[str]:
    """The first ``n`` user turns of the first questions' haystack sessions."""
    turns: list[str] = []
    for q in load_questions(path, limit=max(1, n // 20), first=True):
        for s in q.sessions:
            turns += [text for _, text in s.user_turns()]
            if len(turns) >= n:
                return turns[:n]
    return turns


def extraction(turns: list[str]) -> dict[str, Any]:
    settings = replace(load_settings(), helper="llama")
    helper = helper_from_settings(settings)
    assert helper is not None
    sanitizer = make_sanitizer(settings)
    helper.complete([{"role": "user", "content": "Hi"}], max_tokens=1)  # load it
    asked = failed = helper_facts = rule_facts = proposed = 0
    rejected: Counter[str] = Counter()
    helper_s = 0.0
    t0 = time.perf_counter()
    for text in turns:
        words = user_words(sanitizer.sanitize(text).text)
        rule_facts += sum(1 for ex in extract(words) if ex.fact is not None)
        if not worth_asking(words):
            continue
        asked += 1
        t = time.perf_counter()
        try:
            outcome = llm_extract(helper, words)
        except ExtractionFailed as exc:
            failed += 1
            rejected += exc.rejected
            proposed += sum(exc.rejected.values())
        else:
            helper_facts += len(outcome.facts)
            rejected += outcome.rejected
            proposed += len(outcome.facts) + sum(outcome.rejected.values())
        helper_s += time.perf_counter() - t
    wall = time.perf_counter() - t0
    ungrounded = rejected.get("ungrounded", 0)
    per100 = 100 / max(1, len(turns))
    return {
        "turns": len(turns), "asked": asked,
        "turns_per_s": round(len(turns) / wall, 2),
        "asked_turns_per_s": round(asked / helper_s, 2) if helper_s else None,
        "helper_facts_per_100_turns": round(helper_facts * per100, 1),
        "rule_facts_per_100_turns": round(rule_facts * per100, 1),
        "proposed_items": proposed,
        "grounding_rate": round((proposed - ungrounded) / proposed, 3) if proposed else None,
        "rejected": dict(sorted(rejected.items())),
        "failed_turns": failed,
    }


def compaction(path: Path, n: int) -> dict[str, Any]:
    from memd.engine.background.compact import compact_session

    sessions = [s for q in load_questions(path, limit=max(1, n), first=True)
                for s in q.sessions if len(s.turns) >= 12][:n]
    helper = helper_from_settings(replace(load_settings(), helper="llama"))
    ratios: list[float] = []
    rejected: Counter[str] = Counter()
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, memd.open(
            tmp, embedder="fake", compact_every_turns=KEEP_TURNS + 1,
            compact_keep_turns=KEEP_TURNS) as m:
        for hs in sessions:
            s = m.create_session("local")
            m.append(s.id, "local", [{"role": t.role, "content": t.content} for t in hs.turns])
            t = time.perf_counter()
            made = compact_session(m.store, m.embedder, m.settings, helper, "local", s.id,
                                   time.time())
            seconds.append(time.perf_counter() - t)
            if made is None:
                continue
            ratios.append(float(made.metadata["ratio"]))
            if made.metadata.get("extractive"):
                rejected[str(made.metadata.get("rejected") or "no helper answer")] += 1
    ordered = sorted(ratios)
    return {
        "sessions": len(sessions), "compacted": len(ratios),
        "ratio_median": ordered[len(ordered) // 2] if ordered else None,
        "ratio_min": ordered[0] if ordered else None,
        "ratio_mean": round(sum(ratios) / len(ratios), 2) if ratios else None,
        "extractive_share": round(sum(rejected.values()) / len(ratios), 3) if ratios else None,
        "extractive_why": dict(sorted(rejected.items())),
        "seconds_per_compaction": round(sum(seconds) / len(seconds), 2) if seconds else None,
    }


def chat_latency(turns: list[str], calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, serve(UPSTREAM) as up:
        settings = replace(load_settings(data_dir=Path(tmp)), upstream_url=f"{up}/v1",
                           helper="llama")
        engine = memd.open(settings=settings)
        with serve(create_app(engine, settings)) as base, httpx.Client(timeout=120) as http:
            def call(i: int) -> float:
                body = {"model": "m", "messages": [
                    {"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} ({i})"}]}
                t = time.perf_counter()
                http.post(f"{base}/v1/chat/completions", json=body).raise_for_status()
                return (time.perf_counter() - t) * 1000

            for i in range(3):  # warm: the embedder, connections
                call(i)
            idle = [call(i) for i in range(calls)]
            # The worker's queue: the turns stored in a session of their own, each asked
            # of the helper by an llm_extract job.
            session = engine.create_session("local")
            engine.append(session.id, "local", [{"role": "user", "content": t} for t in turns])
            queued = engine.pending_jobs()
            busy = [call(calls + i) for i in range(calls)]
            left = engine.pending_jobs()
        engine.close()
    return {"calls": calls, "idle_ms": summary(idle), "busy_ms": summary(busy),
            "jobs_queued": queued, "jobs_left_after": left}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="LongMemEval_S (.json or .json.gz)")
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="small sizes, for CI")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.turns, args.sessions, args.calls = 8, 2, 6
    turns = user_turns(data_path(args.data), args.turns)
    print(f"{len(turns)} user turns", file=sys.stderr)
    result = {"extraction": extraction(turns)}
    print(f"extraction: {result['extraction']}", file=sys.stderr)
    result["compaction"] = compaction(data_path(args.data), args.sessions)
    print(f"compaction: {result['compaction']}", file=sys.stderr)
    result["chat_with_worker_busy"] = chat_latency(turns, args.calls)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
