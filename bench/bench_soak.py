"""Soak: the daemon's memory under a long run of concurrent streaming chats.

    nice -n 19 .venv/bin/python -m bench.bench_soak        # 50 streams, 50,000 requests
    .venv/bin/python -m bench.bench_soak --quick           # CI: seconds

A real ``memd serve`` (uvicorn, SQLite, in a data dir of its own) proxies to a fake
OpenAI-compatible upstream that streams a short answer at once. ``--concurrency``
clients each hold a conversation of up to ``--turns`` user turns (the whole history sent
each time, as a chat client does), then start a new one, so the run makes thousands of
sessions; their user messages come from a pool of a few thousand sentences, so memd
stores, extracts and recalls as it would for a user who keeps talking about the same
things. The daemon's RSS is sampled every ``--every`` requests.

The figure that matters is the RSS growth over the last ``--window`` requests: a store
that grows costs a little memory (SQLite's page cache is bounded), but a cache keyed by
session or call that never evicts keeps growing with the request count. Not a test: it
prints figures, and ``verdict`` says whether the growth is under ``--limit`` percent.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from bench.bench_footprint import daemon_env, free_port, rss_mb
from bench.output import emit

TOPICS = ("deploy", "database", "editor", "testing", "python", "rust", "docker", "cache",
          "logging", "auth", "frontend", "api", "queue", "backup", "monitoring", "ci")
DOINGS = ("I am moving our {t} setup to a new server", "My team prefers {t} tools we "
          "can run offline", "Yesterday the {t} job failed twice", "I want to clean up "
          "the {t} config before Friday", "We use {t} with a small budget",
          "Remind me how the {t} part works")
ASKS = ("what should I check first?", "can you sketch the steps?", "is there a simpler "
        "way?", "what would you keep?", "which risks do you see?", "how long will it take?")
ANSWER = ("Sure. ", "Here is ", "a short ", "answer ", "in pieces.")


def sentences() -> list[str]:
    """The user messages' pool: every topic, doing and ask (576 sentences)."""
    return [f"{d.format(t=t)}; {a}" for t, d, a in itertools.product(TOPICS, DOINGS, ASKS)]


async def _stream(request: Request) -> StreamingResponse:
    body = await request.json()

    async def chunks() -> AsyncIterator[bytes]:
        for piece in ANSWER:
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                     "model": body.get("model"),
                     "choices": [{"index": 0, "delta": {"content": piece},
                                  "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        done = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}}
        yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode()

    return StreamingResponse(chunks(), media_type="text/event-stream")


UPSTREAM = Starlette(routes=[Route("/v1/chat/completions", _stream, methods=["POST"])])


class Soak:
    """The clients' shared count and the RSS samples taken as it passes each step."""

    def __init__(self, pid: int, total: int, every: int) -> None:
        self.pid, self.total, self.every = pid, total, every
        self.sent = 0
        self.done = 0
        self.errors: dict[str, int] = {}
        self.samples: list[tuple[int, float]] = [(0, round(rss_mb(pid), 1))]
        self.t0 = time.perf_counter()

    def finished(self) -> None:
        self.done += 1
        if self.done % self.every == 0:
            mb = round(rss_mb(self.pid), 1)
            self.samples.append((self.done, mb))
            rate = self.done / (time.perf_counter() - self.t0)
            print(f"[{time.strftime('%H:%M:%S')}] {self.done} requests, RSS {mb} MB, "
                  f"{rate:.0f}/s", file=sys.stderr, flush=True)


async def client(soak: Soak, base: str, turns: int, seed: int) -> None:
    rng = random.Random(seed)
    pool = sentences()
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        history: list[dict[str, str]] = []
        while soak.sent < soak.total:
            soak.sent += 1
            if len(history) >= 2 * turns:
                history = []
            history.append({"role": "user", "content": rng.choice(pool)})
            reply = ""
            try:
                async with http.stream("POST", "/v1/chat/completions", json={
                        "model": "soak-model", "stream": True,
                        "messages": [{"role": "system", "content": "You are terse."},
                                     *history]}) as resp:
                    if resp.status_code != 200:
                        await resp.aread()
                        key = f"HTTP {resp.status_code}"
                        soak.errors[key] = soak.errors.get(key, 0) + 1
                    async for line in resp.aiter_lines():
                        if line.startswith("data: {"):
                            delta = json.loads(line[6:])["choices"][0]["delta"]
                            reply += delta.get("content") or ""
            except httpx.HTTPError as exc:
                key = type(exc).__name__
                soak.errors[key] = soak.errors.get(key, 0) + 1
            history.append({"role": "assistant", "content": reply})
            soak.finished()


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    up_port, port = free_port(), free_port()
    upstream = uvicorn.Server(uvicorn.Config(UPSTREAM, host="127.0.0.1", port=up_port,
                                             log_level="warning", lifespan="off"))
    up_task = asyncio.create_task(upstream.serve())
    env = {**daemon_env(work), "MEMD_EMBEDDER": args.embedder}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.cli", "serve", "--port", str(port), "--no-log-file",
         "--log-level", "warning", "--upstream-url", f"http://127.0.0.1:{up_port}/v1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            while True:
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit(f"memd serve exited: {proc.communicate()[1][-3000:]}")
                await asyncio.sleep(0.05)
        soak = Soak(proc.pid, args.requests, args.every)
        await asyncio.gather(*(client(soak, base, args.turns, seed)
                               for seed in range(args.concurrency)))
        wall = time.perf_counter() - soak.t0
        db = work / "data" / "memd.db"
        db_mb = round(db.stat().st_size / 1e6, 1) if db.exists() else None
    finally:
        proc.terminate()
        stderr = proc.communicate(timeout=60)[1]
        upstream.should_exit = True
        await up_task
    samples = soak.samples
    window = [mb for n, mb in samples if n >= samples[-1][0] - args.window]
    growth = round((window[-1] - window[0]) / window[0] * 100, 2)
    return {
        "requests": soak.done, "concurrency": args.concurrency, "turns": args.turns,
        "embedder": args.embedder, "wall_s": round(wall, 1),
        "requests_per_s": round(soak.done / wall, 1), "errors": soak.errors,
        "db_mb": db_mb, "rss_mb": samples,
        "growth": {"window_requests": args.window, "from_mb": window[0],
                   "to_mb": window[-1], "percent": growth},
        "verdict": {"rss_growth_pct": [growth, args.limit, growth < args.limit]},
        "daemon_errors": [line for line in stderr.splitlines()
                          if "ERROR" in line or "Traceback" in line][:20],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--turns", type=int, default=10,
                    help="user turns per conversation before a client starts a new one")
    ap.add_argument("--every", type=int, default=1_000, help="sample RSS every N requests")
    ap.add_argument("--window", type=int, default=10_000,
                    help="the last N requests, over which RSS growth is judged")
    ap.add_argument("--limit", type=float, default=2.0, help="RSS growth target, percent")
    ap.add_argument("--embedder", default="fake",
                    help="the daemon's embedder (default fake: the soak is about memory "
                         "the daemon keeps, not the model's)")
    ap.add_argument("--quick", action="store_true",
                    help="CI: 8 streams, 1,200 requests, judged over the last 400")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.requests, args.concurrency, args.every, args.window = 1_200, 8, 100, 400
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="memd-soak-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
