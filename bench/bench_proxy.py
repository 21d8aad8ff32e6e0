"""Proxy overhead: the latency memd adds to a non-streaming chat call.

    .venv/bin/python bench/bench_proxy.py                 # real MiniLM, 1k memories
    .venv/bin/python bench/bench_proxy.py --quick --embedder fake

A minimal OpenAI-compatible upstream (answers at once) and memd both run on uvicorn on
loopback ports. The same requests go to the upstream directly and through memd; each is
a fresh one-message conversation with a different question, so every call through memd
stores a turn, embeds the query, retrieves, compiles, forwards and stores the reply.
Prints p50/p95/p99 of both and of the difference. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import memd
from memd.config import load_settings
from memd.server.app import create_app

TOPICS = ("deploy", "database", "editor", "testing", "python", "rust", "docker", "cache",
          "logging", "auth", "frontend", "api", "queue", "backup", "monitoring", "ci")


async def _chat(request: Request) -> JSONResponse:
    body = json.loads(await request.body())
    return JSONResponse({
        "id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Sure, here is how."}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


UPSTREAM = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])


@contextmanager
def serve(app: Any) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {f"p{p}": round(pct(values, p), 2) for p in (50, 95, 99)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--embedder", default="minilm-onnx",
                    choices=["minilm-onnx", "minilm", "fake"])
    ap.add_argument("--quick", action="store_true", help="small sizes, for CI")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.memories, args.calls = 50, 20
    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp, serve(UPSTREAM) as up:
        settings = replace(load_settings(data_dir=Path(tmp)), upstream_url=f"{up}/v1",
                           embedder=args.embedder)
        engine = memd.open(settings=settings)
        t0 = time.perf_counter()
        texts = [f"For {rng.choice(TOPICS)} I prefer option {i} with setting "
                 f"{rng.choice(TOPICS)}-{rng.randint(1, 999)}" for i in range(args.memories)]
        for text in texts:
            engine.add(text, "local")
        print(f"{args.memories} memories in {time.perf_counter() - t0:.1f} s "
              f"({engine.embedder.name})", file=sys.stderr)
        with serve(create_app(engine, settings)) as base, httpx.Client(timeout=60) as http:
            def call(url: str, i: int) -> float:
                body = {"model": "m", "messages": [
                    {"role": "user", "content": f"How should I set up {rng.choice(TOPICS)} "
                                                f"for service {i}?"}]}
                t = time.perf_counter()
                r = http.post(f"{url}/v1/chat/completions", json=body)
                r.raise_for_status()
                return (time.perf_counter() - t) * 1000

            for i in range(5):  # warm both paths (model load, connections)
                call(up, i)
                call(base, i)
            direct, proxied = [], []
            for i in range(args.calls):
                direct.append(call(up, i))
                proxied.append(call(base, i))
        engine.close()
    overhead = [p - d for p, d in zip(proxied, direct, strict=True)]
    result = {"embedder": args.embedder, "memories": args.memories, "calls": args.calls,
              "direct_ms": summary(direct), "via_memd_ms": summary(proxied),
              "overhead_ms": summary(overhead)}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
