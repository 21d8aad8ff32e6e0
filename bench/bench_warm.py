"""A user's first search after the daemon starts, with and without their vectors loaded
ahead (what ``memd serve`` does in local mode as soon as it listens), on bench_ui's
SQLite dataset (one user: 10,000 memories, 100,000 messages; ``--quick``: 1,000 and
10,000).

Each round opens the store afresh three ways, in turn: **cold** (the first search loads
the vectors itself, as without the warm-up), **warmed** (the background load has ended
before the search comes: the usual case, a chat coming seconds after the start) and
**during** (the search comes the moment the load starts, and waits for it: the worst
case). Searches go through the engine with the fake embedder, so the figure is the
store's work, not the model's.

    .venv/bin/python -m bench.bench_warm             # 10k memories, 5 rounds
    .venv/bin/python -m bench.bench_warm --quick
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.output import emit
from bench.scale_data import TARGET, Spec, build_sqlite

RESULTS = Path(__file__).parent / "results"
QUERY = "the system and the model"
WAYS = ("cold", "warmed", "during")


def _open(path: Path) -> Any:
    import memd
    from memd.config import load_settings

    settings = replace(load_settings(data_dir=path), db=str(path / "memd.db"),
                       embedder="fake", default_user=TARGET)
    return memd.open(settings=settings)


def _search_ms(engine: Any) -> float:
    start = time.perf_counter()
    engine.search(QUERY, TARGET, k=50)
    return (time.perf_counter() - start) * 1000


def _round(path: Path, way: str) -> dict[str, float]:
    """One fresh open: the load's time (if any), the first search's and the second's."""
    from memd.engine.background.warm import warm_in_background

    engine = _open(path)
    try:
        out: dict[str, float] = {}
        if way == "warmed":
            start = time.perf_counter()
            warm_in_background(engine.store, TARGET).join()
            out["load_ms"] = (time.perf_counter() - start) * 1000
        elif way == "during":
            warm = warm_in_background(engine.store, TARGET)
        out["first_ms"] = _search_ms(engine)
        if way == "during":
            warm.join()
        out["second_ms"] = _search_ms(engine)
        return out
    finally:
        engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI's small sizes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    memories, messages = (1_000, 10_000) if args.quick else (10_000, 100_000)
    spec = Spec(users=1, memories=memories, messages=messages, other_memories=0,
                other_messages=0, growth=())
    laps: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) if args.quick else RESULTS / f"ui-data-{spec.key()}"
        build_sqlite(path, spec)
        _round(path, "cold")  # the file into the system's page cache, for every way alike
        for n in range(args.rounds):
            for way in WAYS[n % 3:] + WAYS[: n % 3]:  # interleaved, the order rotating
                laps[way].append(_round(path, way))
    result: dict[str, Any] = {"memories": memories, "messages": messages,
                              "rounds": args.rounds}
    for way, runs in laps.items():
        result[way] = {name: round(statistics.median(r[name] for r in runs), 2)
                       for name in runs[0]}
    emit(result, args.out)


if __name__ == "__main__":
    main()
