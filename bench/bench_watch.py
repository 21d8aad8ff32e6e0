"""How soon a running daemon sees an edit of its config file and of its notes folder.

    .venv/bin/python -m bench.bench_watch            # 10 edits of each kind
    .venv/bin/python -m bench.bench_watch --quick    # CI: 2 of each

Starts ``memd serve`` (the fake embedder: what is timed is the watch, not the model) on
a temporary data dir with a config file, then, ``--edits`` times each:

- **config**: the file is saved (as editors save: a temporary file renamed over it) with
  the retrieval weights switched between two sets; timed until ``/v1/search`` scores
  with the new weights;
- **notes**: a Markdown file in the notes folder is created, edited, then deleted;
  timed until ``/v1/context`` holds (or no longer holds) its line.

Each delay is polled every 20 ms from the save. Target: at most 2 s (the figures are in
bench/README.md). Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.output import emit

TARGET_S = 2.0
DEADLINE_S = 15.0
# every weight but importance off: a hit's score is then its importance (0.7 here)
IMPORTANCE_ONLY = ("[weights]\nsimilarity = 0.0\nkeyword = 0.0\nfreshness = 0.0\n"
                   "access = 0.0\nauthority = 0.0\nimportance = 1.0\nentity = 0.0\n")


def save(path: Path, text: str) -> float:
    """Write ``path`` as an editor saves it; the moment it was saved."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return time.perf_counter()


def until(check: Callable[[], bool], since: float) -> float:
    """Seconds from ``since`` until ``check()`` holds."""
    while not check():
        if time.perf_counter() - since > DEADLINE_S:
            raise SystemExit(f"not seen within {DEADLINE_S} s")
        time.sleep(0.02)
    return time.perf_counter() - since


def summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_s": round(statistics.median(values), 3),
            "max_s": round(max(values), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="2 edits of each kind, for CI")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    edits = 2 if args.quick else args.edits
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        data, config = Path(tmp) / "data", Path(tmp) / "config.toml"
        config.write_text("min_similarity = 0.0\n")
        env = {**os.environ, "MEMD_CONFIG": str(config), "MEMD_DATA_DIR": str(data),
               "MEMD_EMBEDDER": "fake"}
        proc = subprocess.Popen([sys.executable, "-m", "memd.cli", "serve", "--port",
                                 str(port), "--no-log-file"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=30) as http:
                until(lambda: _healthy(http), time.perf_counter())
                http.post("/v1/memories", json={"text": "the deploy key lives in the vault",
                                                "importance": 0.7}).raise_for_status()

                def score() -> float:
                    hits = http.post("/v1/search", json={"query": "deploy key"}).json()["hits"]
                    return float(hits[0]["score"])

                config_delays = []
                for i in range(edits):
                    weighted = i % 2 == 0
                    saved = save(config, "min_similarity = 0.0\n"
                                 + (IMPORTANCE_ONLY if weighted else ""))
                    config_delays.append(until(
                        lambda w=weighted: (abs(score() - 0.7) < 1e-6) == w, saved))

                def context() -> str:
                    r = http.post("/v1/context", json={"query": "what is the capital of Peru"})
                    return r.text

                note = data / "notes" / "style.md"
                note_delays: dict[str, list[float]] = {"add": [], "edit": [], "delete": []}
                for i in range(edits):
                    rule, edited = f"Write British English, rule {i}.", f"Use emoji, rule {i}."
                    saved = save(note, f"# Style\n\n{rule}\n")
                    note_delays["add"].append(until(lambda r=rule: r in context(), saved))
                    saved = save(note, f"# Style\n\n{edited}\n")
                    note_delays["edit"].append(until(lambda r=edited: r in context(), saved))
                    note.unlink()
                    saved = time.perf_counter()
                    note_delays["delete"].append(
                        until(lambda r=edited: r not in context(), saved))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    result = {"target_s": TARGET_S, "config": summary(config_delays),
              "notes": {k: summary(v) for k, v in note_delays.items()}}
    emit(result, args.out)
    return 0


def _healthy(http: httpx.Client) -> bool:
    try:
        return http.get("/health").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
