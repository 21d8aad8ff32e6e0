"""mem0_compare's harness: mem0's virtual environment and the worker processes.

mem0 (``mem0ai``, pinned) lives in its own virtual environment outside the repo, created
on first use and reused while its marker file matches the pinned specs: a pinned CPU
``torch`` first, then ``mem0ai`` and ``sentence-transformers``, which reuse it. Each side
of the comparison runs in a process of its own (:class:`Worker`), so each one's RSS is
its own, read from outside (psutil).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TORCH_SPEC = "torch==2.13.0"  # installed first, so mem0's dependencies take this one
MEM0_SPECS = ("mem0ai==2.2.1", "sentence-transformers")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)

def default_venv() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("memd-bench")) / "mem0-venv"


@dataclass
class Venv:
    python: Path
    created: bool
    seconds: float  # creation time in this run (0 when reused)
    spec: dict[str, Any]


def ensure_venv(path: Path, rebuild: bool = False) -> Venv:
    """mem0's venv at ``path``: reused when its marker matches the pinned specs, else
    (re)created: ``python -m venv``, torch first, then mem0 and sentence-transformers."""
    marker = path / "memd-bench.json"
    python = path / "bin" / "python"
    want = [TORCH_SPEC, *MEM0_SPECS]
    if not rebuild and marker.is_file() and python.exists():
        spec = json.loads(marker.read_text())
        if spec.get("specs") == want:
            return Venv(python, False, 0.0, spec)
    if path.exists():
        shutil.rmtree(path)  # ours (marker) or a half-built one
    t0 = time.perf_counter()
    log(f"creating mem0's venv in {path} (pip cache: {os.environ.get('PIP_CACHE_DIR', 'default')})")
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, TORCH_SPEC], check=True)
    subprocess.run([*pip, *MEM0_SPECS], check=True)
    seconds = time.perf_counter() - t0
    spec = {"specs": want, "created": datetime.now(UTC).isoformat(),
            "seconds": round(seconds, 1)}
    marker.write_text(json.dumps(spec, indent=1))
    log(f"mem0's venv ready in {seconds:.0f}s")
    return Venv(python, True, seconds, spec)


class Worker:
    """One side's process: JSON requests on its stdin, replies on its stdout."""

    def __init__(self, name: str, python: Path | str, module: str, args: Sequence[str],
                 env: dict[str, str]) -> None:
        """``python -m module *args`` from the repo root, where ``bench`` is a package."""
        self.name = name
        self.proc = subprocess.Popen([str(python), "-m", module, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=REPO, text=True,
                                     encoding="utf-8")

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker died during {op!r} "
                               f"(exit code {self.proc.wait()}; see its stderr above)")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def rss_mb(self) -> float:
        import psutil

        return float(psutil.Process(self.proc.pid).memory_info().rss) / 2**20

    def peak_rss_mb(self) -> float | None:
        """The process's high-water RSS (Linux ``VmHWM``; ``ru_maxrss`` would not do: it
        survives ``exec`` and so reports the harness's peak at the fork)."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

