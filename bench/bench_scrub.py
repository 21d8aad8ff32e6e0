"""How long ``memd forget --scrub`` takes on PostgreSQL, and what it rewrites.

    .venv/bin/python -m bench.bench_scrub                 # 10 users x 50 sessions x 10 turns
    .venv/bin/python -m bench.bench_scrub --users 2       # a quicker run

Starts memd's trial PostgreSQL (``memd postgres start``: default settings, full-page
writes and WAL recycling on) in a temporary directory, fills a memd store
(the fake embedder: what is timed is the scrub, not the model), then times
``Store.deep_scrub``: ANALYZE, VACUUM FULL of the database, and the WAL switch and
checkpoint rounds. Prints the database size, the time and the steps' report. Not a test:
it prints figures (bench/README.md keeps them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.output import emit


def run(users: int, sessions: int, turns: int) -> dict[str, Any]:
    import psycopg

    import memd
    from memd import pgserver
    from memd.config import load_settings

    top = Path(tempfile.mkdtemp(prefix="memd-bench-scrub-"))
    try:
        dsn = pgserver.start(top).dsn
        assert dsn is not None
        settings = replace(load_settings(data_dir=top / "d"), db=dsn, embedder="fake",
                           pg_partitions=(16, 16, 16))
        with memd.open(settings=settings) as m:
            for u in range(users):
                for k in range(sessions):
                    s = m.create_session(f"user{u}")
                    m.append(s.id, f"user{u}", [
                        {"role": "user" if i % 2 == 0 else "assistant",
                         "content": f"turn {i} of session {k}: we deploy the rocket "
                                    f"service on friday, blue-green, {u}-{k}-{i}"}
                        for i in range(turns)])
            while m.run_jobs():
                pass
            with psycopg.connect(dsn) as conn:
                size = conn.execute("SELECT pg_database_size(current_database())"
                                    ).fetchone()[0]
            start = time.perf_counter()
            done = m.deep_scrub()
            seconds = time.perf_counter() - start
    finally:
        pgserver.stop(top)
        shutil.rmtree(top, ignore_errors=True)
    return {"messages": users * sessions * turns, "database_mb": round(size / 2**20, 1),
            "scrub_s": round(seconds, 1), "steps": done, "cores": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--out", type=Path, help="Also write the JSON figures here.")
    args = parser.parse_args()
    emit(run(args.users, args.sessions, args.turns), args.out)


if __name__ == "__main__":
    main()
