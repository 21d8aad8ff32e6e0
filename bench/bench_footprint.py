"""The user's install and what the daemon costs: the size of the virtual environment that
``./install.sh`` makes (the user's set: the daemon and its local MiniLM on ONNX Runtime,
no torch, no test tools), the daemon's RSS after its first search, and its first
requests with an empty user cache.

    .venv/bin/python -m bench.bench_footprint             # a fresh venv in a temp dir
    .venv/bin/python -m bench.bench_footprint --venv DIR  # install into DIR (kept), measure

The venv is made by the user's own command, ``MEMD_VENV=<dir> ./install.sh`` (pip's cache
makes it about a minute once the wheels are cached). Its size counts every file once
(hard links once, like ``du --apparent-size``). Then, ``--runs`` times, ``memd serve``
starts from it on a free loopback port with a new data dir and an empty
``XDG_CACHE_HOME``; the figures are the time to ``/health`` (``start_s``), the first
``POST /v1/memories`` (``first_request_s``: the first embedding, which loads the float
model and the stored texts' int8 copy) and the first ``POST /v1/search``
(``first_search_s``: loads the int8 query model; the float one is dropped after it),
then the daemon's RSS (VmRSS of it and its children, from ``/proc``), and what it wrote
into ``$XDG_CACHE_HOME/memd`` (nothing: the ONNX files come from the venv). Medians over
the runs; the targets are in ``TARGETS``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.output import emit

ROOT = Path(__file__).resolve().parent.parent
#: Figure -> (limit, unit): the user's venv, the daemon's RSS after the first search, the
#: first request (and the first search) with an empty cache.
TARGETS = {"venv_mb": (500.0, "MB"), "rss_mb": (300.0, "MB"),
           "first_request_s": (2.0, "s"), "first_search_s": (2.0, "s")}


def install_user_venv(venv: Path, log: Path) -> float:
    """Run ``./install.sh`` (no flags: the user's set) into ``venv``; its wall time (s)."""
    t0 = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run([str(ROOT / "install.sh")], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, check=False,
                              env={**os.environ, "MEMD_VENV": str(venv)})
    if done.returncode != 0:
        raise SystemExit(f"install.sh failed (exit {done.returncode}); see {log}:\n"
                         + log.read_text()[-3000:])
    return time.perf_counter() - t0


def tree_mb(root: Path) -> float:
    """The size of the files under ``root`` (MB, 2**20 bytes), each inode counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in root.rglob("*"):
        st = path.lstat()
        if path.is_symlink() or not path.is_file() or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_size
    return total / 2**20


def imports(venv: Path, module: str) -> bool:
    """Whether ``module`` imports in ``venv``'s Python."""
    done = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {module}"],
                          capture_output=True, check=False)
    return done.returncode == 0


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` and its descendants (MB), from ``/proc``."""
    total_kb, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # exited meanwhile
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines()
                          if line.startswith("VmRSS:")), 0)
    return total_kb / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemon_env(home: Path) -> dict[str, str]:
    """A daemon environment of its own under ``home``: data, config, state and an empty
    cache, and the default embedder named explicitly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMD_", "XDG_"))}
    for name, sub in (("MEMD_DATA_DIR", "data"), ("XDG_CONFIG_HOME", "config"),
                      ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache"),
                      ("XDG_DATA_HOME", "share")):
        env[name] = str(home / sub)
    env["MEMD_EMBEDDER"] = "minilm-onnx"
    return env


def one_run(venv: Path, home: Path) -> dict[str, Any]:
    """Start ``memd serve`` from ``venv`` with an empty cache, store a memory, search."""
    port = free_port()
    env = daemon_env(home)
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(venv / "bin" / "memd"), "serve", "--port", str(port),
                             "--no-log-file", "--log-level", "warning"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit(f"memd serve exited: {proc.communicate()[1][-3000:]}")
                time.sleep(0.02)
            start = time.perf_counter() - t0
            t = time.perf_counter()
            client.post("/v1/memories", json={"text": "I prefer tabs over spaces",
                                              "user_id": "alice"}).raise_for_status()
            first_request = time.perf_counter() - t
            t = time.perf_counter()
            found = client.post("/v1/search", json={"query": "indentation preference",
                                                    "user_id": "alice"})
            first_search = time.perf_counter() - t
            found.raise_for_status()
            hits = found.json()["hits"]
            rss = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    cache = home / "cache" / "memd"  # (onnxruntime keeps a telemetry id beside it)
    return {"start_s": round(start, 3), "first_request_s": round(first_request, 3),
            "first_search_s": round(first_search, 3), "rss_mb": round(rss, 1),
            "found": bool(hits) and hits[0]["text"] == "I prefer tabs over spaces",
            "cache_files": sorted(str(p.relative_to(cache)) for p in cache.rglob("*")
                                  if p.is_file()) if cache.exists() else []}


def measure(venv: Path, runs: int, work: Path) -> dict[str, Any]:
    """The figures of an installed ``venv``."""
    per_run = [one_run(venv, work / f"run{i}") for i in range(runs)]
    result: dict[str, Any] = {
        "venv_mb": round(tree_mb(venv), 1), "torch_importable": imports(venv, "torch"),
        "runs": per_run,
    }
    for key in ("start_s", "first_request_s", "first_search_s", "rss_mb"):
        result[key] = round(statistics.median(r[key] for r in per_run), 3)
    result["verdicts"] = {key: [result[key], limit, result[key] <= limit]
                          for key, (limit, _unit) in TARGETS.items()}
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one daemon run instead of three (CI)")
    ap.add_argument("--runs", type=int, default=None, help="daemon runs (default 3)")
    ap.add_argument("--venv", type=Path, default=None,
                    help="install into (or reuse) this venv instead of a temporary one")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix="memd-footprint-") as tmp:
        work = Path(tmp)
        venv = (args.venv or work / "venv").resolve()
        install_s = install_user_venv(venv, work / "install.log")
        result = {"install_s": round(install_s, 1), "venv": str(venv),
                  **measure(venv, runs, work)}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
