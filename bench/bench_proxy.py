"""Proxy overhead: the latency memd adds to a chat call, and how stable its prompts are.

    .venv/bin/python -m bench.bench_proxy                 # real MiniLM, 1k memories
    .venv/bin/python -m bench.bench_proxy --quick --embedder fake

A minimal OpenAI-compatible upstream (answers at once) and memd both run on uvicorn on
loopback ports. Two parts, in one run:

- One-message chats: the same requests go to the upstream directly and through memd;
  each is a fresh conversation with a different question, so every call through memd
  stores a turn, embeds the query, retrieves, forwards and stores the reply.
- Agent sessions (``tests.agent_traffic``: opencode-, Cline- and Aider-like) whose
  last request is about 10k, 50k and 100k tokens, replayed step by step: each step sent
  to the upstream directly, then through memd, once memd's background jobs of the
  previous step are done (as the model's answer time lets them finish in real use).
  Figures: the latency memd adds per call at each size; the prompt-prefix stability of
  what memd forwards, i.e. the share of each request's tokens (cl100k over a
  chat-template rendering of the messages) that is a byte-identical prefix of the
  session's previous request, averaged over the calls; beside it the same figure for
  the client's own requests (its ceiling: every new message lowers it), the share of
  the previous request that the next one starts with (what a server's prefix cache
  keeps), and the share of all the session's prompt tokens that are the previous
  request's prefix (what the cache serves: a request weighs by its size, so the small
  first steps of a session, where each new file is a large part of the request, do not
  weigh like its long tail). The steps that bring no new user words (an agent's tool
  loop: memd retrieves nothing and sends the same blocks) are also given apart, with the
  CPU time each cost memd (the process's CPU time through memd less directly: on a
  machine that other work keeps busy, the latency follows the scheduler, the CPU time
  the code).

Prints p50/p95/p99 of both and of the difference. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import gc
import itertools
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
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import memd
from bench.output import emit
from memd.config import load_settings
from memd.engine.block.inject import BLOCK_HEADER
from memd.engine.conversation.turns import last_user_text
from memd.engine.memory import Memd
from memd.models.tokens import counter_for, forget_counts
from memd.server.app import create_app
from tests.agent_traffic import AgentSession, ScriptedUpstream, generate

if TYPE_CHECKING:
    from memd.server.later import Later

AGENT_KINDS = ("opencode-like", "cline-like", "aider-like")
AGENT_SIZES = (10_000, 50_000, 100_000)
DOOR_TOKENS = 100_000

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
        if not thread.is_alive():  # the app's startup failed (uvicorn logged why)
            raise SystemExit(f"the server on port {port} did not start")
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


def render(request: dict[str, Any]) -> str:
    """A request as a model server's chat template lays it out: tools, then each message
    (role, content parts' text, tool calls, tool_call_id)."""
    out = [json.dumps(request.get("tools") or [], sort_keys=True)]
    for m in request["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text") or p.get("image_url") or "")
                              for p in content)
        out.append(f"<|{m['role']}|>{content or ''}")
        if m.get("tool_calls"):
            out.append(json.dumps(m["tool_calls"], sort_keys=True))
        if m.get("tool_call_id"):
            out.append(m["tool_call_id"])
        out.append("<|end|>")
    return "".join(out)


def prefix_shares(requests: list[dict[str, Any]]) -> tuple[float, float, float]:
    """Over consecutive requests: the mean share of each request's tokens that is a
    byte-identical prefix of the previous one; the mean share of the previous one that the
    next one starts with; and the share of all the requests' tokens that is the previous
    request's prefix (what a prefix cache serves of the session's prompt tokens: each
    request weighs by its size)."""
    count = counter_for("gpt-4").count
    texts = [render(r) for r in requests]
    sizes = [count(t) for t in texts]
    of_current, of_previous = [], []
    cached = total = 0
    pairs = list(zip(texts, sizes, strict=True))
    for (a, na), (b, nb) in zip(pairs, pairs[1:], strict=False):
        common = 0
        limit = min(len(a), len(b))
        step = 1 << 16
        while common < limit:  # the common prefix, in blocks then character by character
            end = min(common + step, limit)
            if a[common:end] == b[common:end]:
                common = end
            elif step > 1:
                step //= 16
            else:
                break
        shared = count(b[:common])
        of_current.append(shared / nb)
        of_previous.append(shared / na)
        cached += shared
        total += nb
    return (sum(of_current) / len(of_current), sum(of_previous) / len(of_previous),
            cached / total)


def prefix_breaks(forwarded: list[dict[str, Any]], sent: list[dict[str, Any]]
                  ) -> dict[str, int]:
    """The steps whose forwarded request departs from the previous forwarded one at an
    earlier message than the client's own request departs from its previous one: what
    memd costs a prefix cache beyond what the client does. Counted by cause: ``block``
    when the first differing message holds memd's block (it changed or moved),
    ``rewritten`` otherwise (a message memd rewrote: a tool result virtualization held
    out of context, or restored)."""
    out = {"block": 0, "rewritten": 0}
    for n in range(1, min(len(forwarded), len(sent))):
        memd_at = _first_difference(forwarded[n - 1]["messages"], forwarded[n]["messages"])
        client_at = _first_difference(sent[n - 1]["messages"], sent[n]["messages"])
        if memd_at < client_at:
            pair = (forwarded[n - 1]["messages"], forwarded[n]["messages"])
            block = any(memd_at < len(ms) and BLOCK_HEADER in str(ms[memd_at].get("content"))
                        for ms in pair)
            out["block" if block else "rewritten"] += 1
    return out


def _first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    """The index of the first message in which ``b`` differs from ``a``."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def settle(engine: Memd, later: Later | None = None, timeout: float = 30.0) -> None:
    """Wait until memd's background jobs (embedding the last call's messages, ingesting
    what was extracted) are done, as the model's own answer time lets them finish between
    an agent's steps; so each call is measured alone, not against the previous one's
    jobs on the same two cores. With ``later``: the writes that follow an answer too."""
    deadline = time.monotonic() + timeout
    answered(later, timeout)
    while engine.store.pending_jobs() and time.monotonic() < deadline:
        time.sleep(0.005)


def answered(later: Later | None, timeout: float = 30.0) -> None:
    """Wait until memd has stored what its answers so far leave to store once sent
    (memd.server.later): the next call is not measured against them."""
    deadline = time.monotonic() + timeout
    while later is not None and not later.idle and time.monotonic() < deadline:
        time.sleep(0.0005)


def replay_agents(base: str, up: str, upstream: ScriptedUpstream, sizes: tuple[int, ...],
                  kinds: tuple[str, ...], http: httpx.Client, engine: Memd,
                  later: Later | None = None) -> dict[str, Any]:
    """Each kind's session at each size, every step sent directly then through memd."""
    out: dict[str, Any] = {}
    for size in sizes:
        added: list[float] = []
        loop: list[float] = []  # steps with no new user words: an agent's tool loop
        loop_cpu: list[float] = []  # the CPU time those cost memd (see ToolLoopReplay)
        memd_stable: list[float] = []
        memd_reused: list[float] = []
        memd_cached: list[float] = []
        client_stable: list[float] = []
        client_cached: list[float] = []
        breaks = {"block": 0, "rewritten": 0}
        tokens: list[int] = []
        for kind in kinds:
            session: AgentSession = generate(kind, seed=size, target_tokens=size)
            forget_counts()  # the generator counted its messages with memd's counter
            upstream.script([s.reply for s in session.steps for _ in (0, 1)])
            first = len(upstream.requests)
            asked = None
            for step in session.steps:
                settle(engine, later)
                times, cpu = [], []
                for url in (up, base):
                    t, c = time.perf_counter(), time.process_time()
                    r = http.post(f"{url}/v1/chat/completions", json=step.request)
                    r.raise_for_status()
                    times.append((time.perf_counter() - t) * 1000)
                    cpu.append((time.process_time() - c) * 1000)
                added.append(times[1] - times[0])
                words = last_user_text(step.request["messages"], 10**9)
                if words == asked:
                    loop.append(times[1] - times[0])
                    loop_cpu.append(cpu[1] - cpu[0])
                asked = words
            via_memd = upstream.requests[first + 1::2]
            stable, reused, cached = prefix_shares(via_memd)
            memd_stable.append(stable)
            memd_reused.append(reused)
            memd_cached.append(cached)
            for cause, n in prefix_breaks(via_memd, [s.request for s in session.steps]).items():
                breaks[cause] += n
            client = prefix_shares([s.request for s in session.steps])
            client_stable.append(client[0])
            client_cached.append(client[2])
            tokens.append(counter_for("gpt-4").count(render(session.steps[-1].request)))
        out[str(size)] = {
            "calls": len(added), "last_request_tokens": tokens,
            "added_ms": summary(added),
            "tool_loop_calls": len(loop), "tool_loop_added_ms": summary(loop),
            "tool_loop_cpu_ms": summary(loop_cpu),
            "prefix_share_memd": round(sum(memd_stable) / len(memd_stable), 4),
            "prefix_share_client": round(sum(client_stable) / len(client_stable), 4),
            "previous_reused_memd": round(sum(memd_reused) / len(memd_reused), 4),
            "prefix_tokens_memd": round(sum(memd_cached) / len(memd_cached), 4),
            "prefix_tokens_client": round(sum(client_cached) / len(client_cached), 4),
            "prefix_breaks_memd": breaks,
        }
        print(f"agent sessions ~{size} tokens: {out[str(size)]}", file=sys.stderr)
    return out


class ToolLoopReplay:
    """Agent sessions like those of :func:`replay_agents`, replayed without end for
    ``bench.ab``: each kind in turn, each time with the next seed (a new conversation),
    memd's background jobs run between the steps. :meth:`step` sends the next step
    directly and through memd, as ``replay_agents`` does; with ``stream``, every request
    asks for a streamed answer (the step then ends with the stream's)."""

    def __init__(self, engine: Memd, base: str, up: str, upstream: ScriptedUpstream,
                 http: httpx.Client, size: int, later: Later | None = None,
                 stream: bool = False) -> None:
        self.engine, self.base, self.up, self.upstream, self.http, self.later = (
            engine, base, up, upstream, http, later)
        self._steps = self._replays(size, stream)
        self.cpu_added: float | None = None

    @staticmethod
    def _replays(size: int, stream: bool) -> Iterator[tuple[Any, bool]]:
        for n in itertools.count():
            kind = AGENT_KINDS[n % len(AGENT_KINDS)]
            session = generate(kind, seed=size + n // len(AGENT_KINDS), target_tokens=size,
                               stream=stream)
            forget_counts()  # the generator counted its messages with memd's counter
            asked = None
            for step in session.steps:
                words = last_user_text(step.request["messages"], 10**9)
                yield step, words == asked
                asked = words

    def step(self) -> float | None:
        """The latency memd added to the next step, if it is a tool-loop step (no new
        user words), else None. :attr:`cpu_added` is then the CPU time the step cost
        memd: the process's CPU time (all its threads: client, memd and upstream) through
        memd less directly, which a busy machine's scheduler does not stretch."""
        step, loop = next(self._steps)
        self.upstream.script([step.reply, step.reply])
        times, cpu = [], []
        for url in (self.up, self.base):
            t, c = time.perf_counter(), time.process_time()
            r = self.http.post(f"{url}/v1/chat/completions", json=step.request)
            r.raise_for_status()
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        answered(self.later)
        self.engine.run_jobs()
        self.cpu_added = cpu[1] - cpu[0] if loop else None
        return times[1] - times[0] if loop else None


def measure_doors(engine: Memd, settings: Any, tokens: int, sessions: int
                  ) -> dict[str, Any]:
    """The Anthropic Messages, OpenAI Responses and Ollama doors on the same memd, in
    front of a scripted upstream serving all (:mod:`bench.bench_doors`,
    :mod:`bench.bench_ollama`): the latency each adds to
    sessions of about ``tokens``, and the prompt cache of the recorded Claude Code and
    Codex sessions replayed."""
    from bench import bench_doors, bench_ollama  # they build on this module's helpers

    upstream = bench_ollama.OllamaDoorUpstream()
    with serve(upstream.app) as up:
        door_settings = replace(settings, upstream_url=f"{up}/v1", upstream_anthropic_url=up,
                                upstream_ollama_url=up)
        app = create_app(engine, door_settings)
        with serve(app) as base, httpx.Client(timeout=120) as http:
            def settled() -> None:
                settle(engine, app.state.later)

            out = bench_doors.replay_doors(base, up, upstream, tokens, sessions, http,
                                           settled, summary,
                                           {**bench_doors.DOORS, **bench_ollama.DOORS})
            out["claude_code_replay"] = bench_doors.replay_recorded(
                "anthropic_messages", base, upstream, http, settled)
            out["codex_replay"] = bench_doors.replay_recorded(
                "openai_responses", base, upstream, http, settled)
    for door, figures in out.items():
        print(f"door {door}: {figures}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--embedder", default="minilm-onnx",
                    choices=["minilm-onnx", "minilm", "fake"])
    ap.add_argument("--quick", action="store_true", help="small sizes, for CI")
    ap.add_argument("--agent-sizes", type=int, nargs="*", default=list(AGENT_SIZES),
                    help="approximate tokens of the replayed agent sessions' last requests")
    ap.add_argument("--door-tokens", type=int, default=DOOR_TOKENS,
                    help="approximate tokens of the door sessions' last requests")
    ap.add_argument("--door-sessions", type=int, default=3,
                    help="sessions per door (Anthropic Messages, OpenAI Responses, "
                         "Ollama)")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.memories, args.calls, args.agent_sizes = 50, 20, [6_000]
        args.door_tokens, args.door_sessions = 34_000, 1
    rng = random.Random(3)
    agents = ScriptedUpstream()
    with tempfile.TemporaryDirectory() as tmp, serve(UPSTREAM) as up, \
            serve(agents.app) as agent_up:
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
        gc.collect()
        gc.freeze()  # as `memd serve` does after start-up: no GC walks over the setup
        app = create_app(engine, settings)
        with serve(app) as base, httpx.Client(timeout=60) as http:
            def call(url: str, i: int) -> float:
                body = {"model": "m", "messages": [
                    {"role": "user", "content": f"How should I set up {rng.choice(TOPICS)} "
                                                f"for service {i}?"}]}
                answered(app.state.later)
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
        agent_settings = replace(settings, upstream_url=f"{agent_up}/v1")
        app = create_app(engine, agent_settings)
        with serve(app) as base, httpx.Client(timeout=120) as http:
            agent = replay_agents(base, agent_up, agents, tuple(args.agent_sizes),
                                  AGENT_KINDS, http, engine, app.state.later)
        doors = measure_doors(engine, settings, args.door_tokens, args.door_sessions)
        engine.close()
    overhead = [p - d for p, d in zip(proxied, direct, strict=True)]
    result = {"embedder": args.embedder, "memories": args.memories, "calls": args.calls,
              "direct_ms": summary(direct), "via_memd_ms": summary(proxied),
              "overhead_ms": summary(overhead), "agent": agent, "doors": doors}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
