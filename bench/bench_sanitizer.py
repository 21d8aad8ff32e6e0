"""Sanitizer speed: per-call latency and throughput of memd.privacy on chat-sized turns and
tool-result-sized files.

    .venv/bin/python -m bench.bench_sanitizer
    .venv/bin/python -m bench.bench_sanitizer --quick            # CI: fewer calls
    .venv/bin/python -m bench.bench_sanitizer --detect-secrets   # also Yelp's detect-secrets

Inputs, all generated from a fixed seed: 2 KB prose turns (a few with a key or a
password in them), 100 KB source files (memd's own modules, cut and repeated) and 100 KB
application logs (timestamps, IPs, request ids, hashes; one token among them). Each is
sanitized in the ``secrets`` and ``secrets+pii`` modes, each call with a fresh session.
Targets: p99 at most 1 ms for a 2 KB turn and 10 ms for a 100 KB result.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.output import emit
from memd.privacy import RegexSanitizer

TURN_CHARS = 2_000
RESULT_CHARS = 100_000
WORDS = ("the a to of and we it this that is for on with deploy config server database "
         "user function return value list cache error retry token budget password memory "
         "session query index latency test build release branch merge review fix").split()


def prose_turns(rng: random.Random, n: int) -> list[str]:
    """Chat turns of about 2 KB; every fifth holds a credential."""
    turns = []
    for i in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < TURN_CHARS:
            words += [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
            words[-1] += rng.choice([".", ",", "?", "."])
        if i % 5 == 0:
            secret = "sk-" + "".join(rng.choice("abcdefghijkLMNOP0123456789") for _ in range(48))
            words.insert(rng.randrange(len(words)), f"my key is {secret}")
        if i % 5 == 1:
            words.insert(rng.randrange(len(words)), "the staging password is Tr0ub4dor&3")
        turns.append(" ".join(words)[:TURN_CHARS])
    return turns


def source_files() -> list[str]:
    """100 KB slices of memd's own source, as an agent reads files."""
    root = Path(__file__).resolve().parent.parent / "memd"
    code = "\n".join(p.read_text("utf-8") for p in sorted(root.rglob("*.py")))
    step = max(1, (len(code) - RESULT_CHARS) // 8)
    return [(code[i:] + code)[:RESULT_CHARS] for i in range(0, 8 * step, step)]


def log_files(rng: random.Random, n: int) -> list[str]:
    """100 KB application logs with one bearer token each."""
    logs = []
    for _ in range(n):
        lines = []
        while sum(len(line) + 1 for line in lines) < RESULT_CHARS:
            t = rng.randint(0, 86_399)
            lines.append(
                f"2024-05-{rng.randint(1, 28):02d}T{t // 3600:02d}:{t // 60 % 60:02d}:"
                f"{t % 60:02d}.{rng.randint(0, 999_999):06d}Z INFO "
                f"{rng.choice(['GET', 'POST', 'PUT'])} /api/v{rng.randint(1, 3)}/items/"
                f"{rng.randint(1, 10**6)} status={rng.choice([200, 201, 404, 500])} "
                f"ip=10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)} "
                f"req={uuid.UUID(int=rng.getrandbits(128))} "
                f"etag={rng.getrandbits(128):032x} took={rng.random() * 900:.1f}ms")
        lines.insert(len(lines) // 2, "DEBUG auth header: Authorization: Bearer "
                     + "".join(rng.choice("ABCdef0123456789xyzXYZ") for _ in range(40)))
        logs.append("\n".join(lines)[:RESULT_CHARS])
    return logs


def measure(run: Callable[[str], object], texts: list[str], calls: int) -> dict[str, float]:
    """p50 and p99 of one call in milliseconds, and throughput in MB/s."""
    for text in texts[:2]:
        run(text)
    times = []
    for i in range(calls):
        text = texts[i % len(texts)]
        t = time.perf_counter()
        run(text)
        times.append(time.perf_counter() - t)
    times.sort()
    size = sum(len(texts[i % len(texts)]) for i in range(calls))
    return {
        "p50_ms": round(statistics.median(times) * 1000, 3),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 3),
        "mb_per_s": round(size / sum(times) / 1e6, 1),
    }


def detect_secrets_runner(stack: ExitStack) -> Callable[[str], object]:
    """Yelp's detect-secrets with its default plugins and filters, line by line, the way
    it scans a string (imported here: it is not a dependency of memd)."""
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    stack.enter_context(default_settings())

    def run(text: str) -> object:
        return [list(scan_line(line)) for line in text.splitlines()]

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (CI)")
    ap.add_argument("--detect-secrets", action="store_true",
                    help="also time detect-secrets on the same inputs (must be installed)")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    rng = random.Random(7)
    inputs = {"prose_2kb": prose_turns(rng, 50), "code_100kb": source_files(),
              "log_100kb": log_files(rng, 4)}
    calls = {"prose_2kb": 200 if args.quick else 2000,
             "code_100kb": 20 if args.quick else 200, "log_100kb": 20 if args.quick else 200}
    result: dict[str, Any] = {}
    for mode in ("secrets", "secrets+pii"):
        sanitizer = RegexSanitizer(mode)
        result[mode] = {name: measure(sanitizer.sanitize, texts, calls[name])
                        for name, texts in inputs.items()}
    if args.detect_secrets:
        with ExitStack() as stack:
            run = detect_secrets_runner(stack)
            result["detect-secrets"] = {name: measure(run, texts, max(5, calls[name] // 20))
                                        for name, texts in inputs.items()}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
