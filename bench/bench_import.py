"""Import throughput: LongMemEval_S haystacks through ``memd import-history``'s path.

    nice -n 19 .venv/bin/python -m bench.bench_import              # 25 questions, MiniLM
    .venv/bin/python -m bench.bench_import --quick                 # 2 questions, fake model

Each haystack session of ``--questions`` LongMemEval_S questions (spread over the file,
duplicates once) becomes one conversation of a source (``longmemeval``, keyed by the
session id, dated by the haystack date), user and assistant turns alike, and the lot goes
through :func:`memd.imports.import_conversations` with its jobs run, the way the CLI
imports: so the figure is turns per second until searchable (messages embedded and in
the full-text index, extraction done), on each backend (``--backends``; PostgreSQL on
an embedded server in a temporary folder). A second import of the same conversations
checks idempotency and times the "nothing new" pass. As the CLI, the import leaves the
passages of the messages (which refine how a found message ranks) to jobs run after it
returns: their time is reported apart (``passages_s``), and no job may be left once
they ran.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import memd
from bench.longmemeval import data_path, load_questions, make_embedder
from bench.output import emit
from memd.imports import Conversation, Turn, import_conversations

SOURCE = "longmemeval"


def conversations(questions: int, data: Path | None) -> list[Conversation]:
    seen: dict[str, Conversation] = {}
    for q in load_questions(data_path(data), questions):
        for s in q.sessions:
            if s.id not in seen:
                seen[s.id] = Conversation(SOURCE, s.id, tuple(
                    Turn(t.role, t.content, s.date) for t in s.turns), client=SOURCE)
    return sorted(seen.values(), key=lambda c: (c.created_at or c.turns[0].at or 0.0))


def run_backend(backend: str, convs: list[Conversation], embedder: str,
                tmp: Path) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    server = None
    if backend == "postgres":
        from bench.scale_data import PgCluster

        server = PgCluster(tmp / "pg")
        server.create_database("bench_import")
        overrides = {"db": server.dsn("bench_import")}
    try:
        engine = memd.open(tmp / backend, embedder=make_embedder(embedder), **overrides)
        try:
            turns = sum(len(c.turns) for c in convs)
            t0 = time.perf_counter()
            counts = import_conversations(engine, "bench", convs, run_jobs=True,
                                          passages_later=True)
            took = time.perf_counter() - t0
            t2 = time.perf_counter()
            while engine.jobs.run_due():  # the passages' jobs
                pass
            passages = time.perf_counter() - t2
            t1 = time.perf_counter()
            again = import_conversations(engine, "bench", convs, run_jobs=True)
            second = time.perf_counter() - t1
            pending = engine.store.pending_jobs()
        finally:
            engine.close()
    finally:
        if server is not None:
            server.stop()
    return {"conversations": len(convs), "turns": turns, "messages": counts.messages,
            "seconds": round(took, 2), "turns_per_s": round(turns / took, 1),
            "passages_s": round(passages, 2),
            "reimport": {"messages": again.messages, "seconds": round(second, 2)},
            "pending_jobs_after": pending}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=25)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--embedder", default="minilm-onnx",
                    choices=["minilm-onnx", "minilm", "fake"])
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--quick", action="store_true",
                    help="2 questions, the fake embedder, SQLite and PostgreSQL (CI).")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.quick:
        args.questions, args.embedder = 2, "fake"
    convs = conversations(args.questions, args.data)
    result: dict[str, Any] = {"questions": args.questions, "embedder": args.embedder,
                              "backends": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            result["backends"][backend] = run_backend(backend, convs, args.embedder,
                                                      Path(tmp))
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
