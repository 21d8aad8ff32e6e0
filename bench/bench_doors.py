"""The Anthropic Messages and OpenAI Responses doors (and Ollama's, :mod:`bench.bench_ollama`):
the latency each adds to an agent's calls, and how much of each forwarded prompt a
provider's prompt cache keeps.

Run by ``bench_proxy`` beside the Chat Completions door's figures, on the same memd
(same store, same memories, same embedder):

- Sessions shaped like the real clients' (their tools, system prompt and request fields
  taken from the recorded traffic in tests/fixtures/doors): Claude Code's streamed
  ``/v1/messages?beta=true`` (24 tools, system blocks with ``cache_control``, adaptive
  thinking, signed thinking blocks sent back, ``Read`` tool loops, the breakpoint on the
  newest block) and Codex's streamed ``/v1/responses`` (developer items, the
  ``<environment_context>`` message, encrypted reasoning items sent back,
  ``exec_command`` calls and their outputs), growing step by step to about the target
  size, a new user turn every few tool steps. Each step goes to the upstream directly,
  then through memd, once memd's background jobs of the previous step are done; the
  upstream streams its scripted answer at once. Figures per door: the latency memd adds
  (p50/p95/p99 over every step, and over the steps of at least 80 % of the target size),
  the CPU time it costs (the process's, all its threads: client, memd and upstream,
  through memd less directly; on a machine that other work keeps busy the latency
  follows the scheduler, the CPU time the code), and the share of each forwarded prompt
  (tools -> system -> messages, byte for byte) that is the previous one's prefix, beside
  the client's own.
- The recorded Claude Code session (three user turns with tool steps) replayed through
  memd to an upstream that computes ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` from its breakpoints (:mod:`bench.prompt_cache`): the
  prefix share per call and whether memd logged each call's cache figures.
"""

from __future__ import annotations

import copy
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bench.prompt_cache import PromptCache, common_prefix, prompt_bytes, responses_prompt_bytes
from memd.models.tokens import counter_for
from tests.agent_traffic import Project

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "doors"
SIGNATURE = "EqQBCkYIBxgCKkD" + "x" * 300 + "=="  # a thinking block's signature
ENCRYPTED = "gAAAAAB" + "y" * 1200 + "=="  # a reasoning item's encrypted content
TURN_EVERY = 6  # tool steps between two user turns
PROMPTS = ("Read the sources and tell me where the retry logic lives.",
           "Now check the tests for that module and say what they cover.",
           "Which files would a change to the error handling touch?",
           "Summarize what you read about the storage layer.")
FINAL = "Done: I read what you asked."
MESSAGES_PATH = "/v1/messages?beta=true"
RESPONSES_PATH = "/v1/responses"


def recorded(name: str) -> list[dict[str, Any]]:
    """A recorded session's requests (tests/fixtures/doors)."""
    return [json.loads(line) for line in (FIXTURES / name).read_text("utf-8").splitlines()]


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


async def _anthropic_events(message: dict[str, Any]) -> AsyncIterator[bytes]:
    """A Messages reply as the API streams it: every block's start, deltas and stop."""
    yield _sse("message_start", {"message": {**message, "content": [], "stop_reason": None}})
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {"thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "tool_use": {**block, "input": {}}, "text": {"type": "text", "text": ""}}
        yield _sse("content_block_start", {"index": i, "content_block": empty[kind]})
        deltas = {"thinking": [{"type": "thinking_delta", "thinking": block.get("thinking")},
                               {"type": "signature_delta", "signature": block.get("signature")}],
                  "tool_use": [{"type": "input_json_delta",
                                "partial_json": json.dumps(block.get("input"))}],
                  "text": [{"type": "text_delta", "text": block.get("text")}]}
        for delta in deltas[kind]:
            yield _sse("content_block_delta", {"index": i, "delta": delta})
        yield _sse("content_block_stop", {"index": i})
    yield _sse("message_delta", {"delta": {"stop_reason": message["stop_reason"],
                                           "stop_sequence": None},
                                 "usage": {"output_tokens": 9}})
    yield _sse("message_stop", {})


async def _responses_events(response: dict[str, Any]) -> AsyncIterator[bytes]:
    """A Responses reply as the API streams it, each event with its sequence number."""
    n = 0

    def event(kind: str, data: dict[str, Any]) -> bytes:
        nonlocal n
        n += 1
        return _sse(kind, {"sequence_number": n, **data})

    yield event("response.created", {"response": {**response, "status": "in_progress",
                                                  "output": []}})
    for i, item in enumerate(response["output"]):
        yield event("response.output_item.added", {"output_index": i, "item": item})
        if item["type"] == "message":
            yield event("response.output_text.delta", {
                "output_index": i, "content_index": 0, "item_id": item.get("id"),
                "delta": item["content"][0]["text"]})
        elif item["type"] == "function_call":
            yield event("response.function_call_arguments.delta", {
                "output_index": i, "item_id": item.get("id"), "delta": item["arguments"]})
        yield event("response.output_item.done", {"output_index": i, "item": item})
    yield event("response.completed", {"response": response})


class DoorUpstream:
    """Both APIs on one server, answering at once with scripted replies in order (a
    Messages reply is its content blocks, a Responses reply its output items), streamed
    when asked. Every request body is kept. With ``cache`` set, the usage comes from a
    :class:`PromptCache` of the requests in arrival order (breakpoints for Messages, the
    automatic prefix for Responses), each kept in ``usages``."""

    def __init__(self) -> None:
        self.replies: deque[list[dict[str, Any]]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.cache: PromptCache | None = None
        self.usages: list[dict[str, int]] = []  # per request, when ``cache``
        self.app = Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"])])

    def script(self, replies: list[list[dict[str, Any]]]) -> None:
        self.replies.extend(replies)

    def _next(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.requests.append(body)
        return self.replies.popleft() if self.replies else [
            {"type": "text", "text": FINAL}]

    async def messages(self, request: Request) -> Response:
        body = json.loads(await request.body())
        content = self._next(body)
        usage = {"input_tokens": 10, "cache_read_input_tokens": 0,
                 "cache_creation_input_tokens": 0}
        if self.cache:
            usage = self.cache.usage(body)
            self.usages.append(usage)
        message = {"id": f"msg_{len(self.requests):05d}", "type": "message",
                   "role": "assistant", "model": body.get("model"), "content": content,
                   "stop_reason": "tool_use" if content[-1]["type"] == "tool_use"
                   else "end_turn", "stop_sequence": None,
                   "usage": {**usage, "output_tokens": 9}}
        if not body.get("stream"):
            return JSONResponse(message)
        return StreamingResponse(_anthropic_events(message), media_type="text/event-stream")

    async def responses(self, request: Request) -> Response:
        body = json.loads(await request.body())
        output = self._next(body)
        cached = 0
        if self.cache:
            cached = self.cache.automatic(responses_prompt_bytes(body))
            self.usages.append({"cache_read_input_tokens": cached})
        response = {"id": f"resp_{len(self.requests)}", "object": "response",
                    "created_at": 1, "status": "completed", "model": body.get("model"),
                    "output": output, "usage": {
                        "input_tokens": 10, "output_tokens": 9, "total_tokens": 19,
                        "input_tokens_details": {"cached_tokens": cached}}}
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(_responses_events(response),
                                 media_type="text/event-stream")


@dataclass(frozen=True)
class DoorStep:
    """One round trip: the body the client sends and the reply the model streams, which
    the next step's body holds."""

    body: dict[str, Any]
    reply: list[dict[str, Any]]
    new_words: bool  # whether the body brings a new user turn (not a tool step)


def _files(rng: Random) -> Iterator[tuple[str, str]]:
    """A project's files, read again and again (as an agent rereads after edits)."""
    project = Project(rng)
    while True:
        for path, text in project.files.items():
            yield f"{project.root}/{path}", text


def grow(target_tokens: int, seed: int, start: Callable[[], int],
          tool_step: Callable[[int, str, str], int],
          user_turn: Callable[[int, str], int]) -> None:
    """Drive a session's growth: tool steps reading files, a new user turn every
    :data:`TURN_EVERY` steps, until the request is about ``target_tokens`` (4 bytes a
    token). The callbacks build the steps and return the request's size in bytes."""
    rng = Random(seed)
    files = _files(rng)
    size, n = start(), 0
    while size < target_tokens * 4:
        n += 1
        path, text = next(files)
        if n % TURN_EVERY == 0:
            size = user_turn(n, PROMPTS[n // TURN_EVERY % len(PROMPTS)])
        else:
            size = tool_step(n, path, text)


def claude_session(target_tokens: int, seed: int) -> list[DoorStep]:
    """A Claude Code session through ``/v1/messages`` growing to about
    ``target_tokens``: the recorded request's fields, tools and system blocks, its first
    user message and the ``system`` message after it, then ``Read`` tool loops."""
    base = recorded("claude-code.jsonl")[0]["body"]
    history: list[dict[str, Any]] = copy.deepcopy(base["messages"])
    first = history[0]["content"]
    first[-1] = {"type": "text", "text": PROMPTS[seed % len(PROMPTS)]}
    steps: list[DoorStep] = []
    pending: list[dict[str, Any]] = []  # what the client appends before the next body

    def body(new_words: bool) -> int:
        messages = history + pending
        last = dict(messages[-1])
        blocks = last["content"] if isinstance(last["content"], list) else [
            {"type": "text", "text": last["content"]}]
        last["content"] = [*blocks[:-1], {**blocks[-1], "cache_control": {
            "type": "ephemeral"}}]
        steps.append(DoorStep({**base, "messages": [*messages[:-1], last]}, [], new_words))
        history.extend(pending)
        pending.clear()
        return len(json.dumps(steps[-1].body))

    def reply(content: list[dict[str, Any]]) -> None:
        steps[-1] = DoorStep(steps[-1].body, content, steps[-1].new_words)
        pending.append({"role": "assistant", "content": content})

    def tool_step(n: int, path: str, text: str) -> int:
        thinking = {"type": "thinking", "thinking": f"Read {path}.", "signature": SIGNATURE}
        use = {"type": "tool_use", "id": f"toolu_{seed:02d}{n:04d}", "name": "Read",
               "input": {"file_path": path}}
        reply([thinking, use])
        numbered = "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(text.split("\n"), 1))
        pending.append({"role": "user", "content": [{"type": "tool_result",
                                                     "tool_use_id": use["id"],
                                                     "content": numbered}]})
        return body(False)

    def user_turn(n: int, prompt: str) -> int:
        reply([{"type": "thinking", "thinking": "Answer.", "signature": SIGNATURE},
               {"type": "text", "text": FINAL}])
        pending.append({"role": "user", "content": prompt})
        return body(True)

    grow(target_tokens, seed, lambda: body(True), tool_step, user_turn)
    reply([{"type": "text", "text": FINAL}])
    return steps


def codex_session(target_tokens: int, seed: int) -> list[DoorStep]:
    """A Codex session through ``/v1/responses`` growing to about ``target_tokens``:
    the recorded request's fields, tools, developer items and environment message, then
    ``exec_command`` loops with encrypted reasoning sent back."""
    base = recorded("codex.jsonl")[0]["body"]
    items: list[dict[str, Any]] = copy.deepcopy(base["input"])
    items[-1] = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": PROMPTS[seed % len(PROMPTS)]}]}
    steps: list[DoorStep] = []

    def body(new_words: bool) -> int:
        steps.append(DoorStep({**base, "input": list(items)}, [], new_words))
        return len(json.dumps(steps[-1].body))

    def reply(output: list[dict[str, Any]]) -> None:
        steps[-1] = DoorStep(steps[-1].body, output, steps[-1].new_words)
        items.extend(output)

    def reasoning(n: int) -> dict[str, Any]:
        return {"type": "reasoning", "id": f"rs_{seed:02d}{n:04d}", "summary": [],
                "content": None, "encrypted_content": ENCRYPTED}

    def tool_step(n: int, path: str, text: str) -> int:
        call = {"type": "function_call", "id": f"fc_{seed:02d}{n:04d}",
                "call_id": f"call_{seed:02d}{n:04d}", "name": "exec_command",
                "arguments": json.dumps({"cmd": f"cat {path}"}), "status": "completed"}
        reply([reasoning(n), call])
        items.append({"type": "function_call_output", "call_id": call["call_id"],
                      "output": "Process exited with code 0\nOutput:\n" + text})
        return body(False)

    def user_turn(n: int, prompt: str) -> int:
        reply([reasoning(n), {"type": "message", "id": f"msg_{seed:02d}{n:04d}",
                              "role": "assistant", "status": "completed", "content": [
                                  {"type": "output_text", "annotations": [], "text": FINAL}]}])
        items.append({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": prompt}]})
        return body(True)

    grow(target_tokens, seed, lambda: body(True), tool_step, user_turn)
    reply([{"type": "message", "id": "msg_last", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "text": FINAL}]}])
    return steps


DOORS: dict[str, tuple[Callable[[int, int], list[DoorStep]], str,
                       Callable[[dict[str, Any]], bytes]]] = {
    "anthropic_messages": (claude_session, MESSAGES_PATH, prompt_bytes),
    "openai_responses": (codex_session, RESPONSES_PATH, responses_prompt_bytes),
}


def prefix_share(prompts: list[bytes]) -> float:
    """The mean, over consecutive prompts, of the share of each that is the previous
    one's prefix, byte for byte."""
    shares = [common_prefix(a, b) / len(b) for a, b in zip(prompts, prompts[1:], strict=False)]
    return sum(shares) / len(shares)


Doors = dict[str, tuple[Callable[[int, int], list[DoorStep]], str,
                        Callable[[dict[str, Any]], bytes]]]


def replay_doors(base: str, up: str, upstream: DoorUpstream, target_tokens: int,
                 sessions: int, http: httpx.Client, settle: Callable[[], None],
                 summary: Callable[[list[float]], dict[str, float]],
                 doors: Doors | None = None) -> dict[str, Any]:
    """Each door's sessions of about ``target_tokens`` (``doors``: session maker, path
    and prompt bytes of each; default :data:`DOORS`), every step sent directly then
    through memd (see the module docstring); the figures per door."""
    count = counter_for("gpt-4").count
    out: dict[str, Any] = {}
    for door, (make, path, prompt) in (doors or DOORS).items():
        added: list[float] = []
        cpu_added: list[float] = []  # the process's CPU time through memd less directly
        large: list[float] = []
        loop: list[float] = []
        loop_cpu: list[float] = []
        memd_share: list[float] = []
        client_share: list[float] = []
        tokens: list[int] = []
        for seed in range(sessions):
            steps = make(target_tokens, seed)
            upstream.script([s.reply for s in steps for _ in (0, 1)])
            first = len(upstream.requests)
            for step in steps:
                settle()
                raw = json.dumps(step.body)
                times, cpu = [], []
                for url in (up, base):
                    t, c = time.perf_counter(), time.process_time()
                    r = http.post(url + path, content=raw, headers={
                        "content-type": "application/json", "x-api-key": "sk-ant-bench",
                        "authorization": "Bearer sk-bench", "anthropic-version": "2023-06-01"})
                    r.raise_for_status()
                    times.append((time.perf_counter() - t) * 1000)
                    cpu.append((time.process_time() - c) * 1000)
                added.append(times[1] - times[0])
                cpu_added.append(cpu[1] - cpu[0])
                if len(raw) >= 0.8 * target_tokens * 4:
                    large.append(times[1] - times[0])
                if not step.new_words:
                    loop.append(times[1] - times[0])
                    loop_cpu.append(cpu[1] - cpu[0])
            via_memd = upstream.requests[first + 1::2]
            memd_share.append(prefix_share([prompt(b) for b in via_memd]))
            client_share.append(prefix_share([prompt(s.body) for s in steps]))
            tokens.append(count(prompt(steps[-1].body).decode()))
        out[door] = {
            "calls": len(added), "last_request_tokens": tokens,
            "added_ms": summary(added), "cpu_added_ms": summary(cpu_added),
            "large_calls": len(large),
            "large_added_ms": summary(large) if large else None,
            "tool_loop_calls": len(loop), "tool_loop_added_ms": summary(loop),
            "tool_loop_cpu_ms": summary(loop_cpu),
            "prefix_share_memd": round(sum(memd_share) / len(memd_share), 4),
            "prefix_share_client": round(sum(client_share) / len(client_share), 4),
        }
    return out


def _replies(door: str, bodies: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each recorded request's reply, as the next request holds it: the assistant
    message after its messages (Messages), or the output items after its input, up to
    the client's next item (Responses)."""
    if door == "anthropic_messages":
        return [nxt["messages"][len(cur["messages"])]["content"]
                for cur, nxt in zip(bodies, bodies[1:], strict=False)]
    out = []
    for cur, nxt in zip(bodies, bodies[1:], strict=False):
        items = []
        for item in nxt["input"][len(cur["input"]):]:
            if item.get("type") == "function_call_output" or item.get("role") == "user":
                break
            items.append(item)
        out.append(items)
    return out


RECORDED = {"anthropic_messages": ("claude-code.jsonl", MESSAGES_PATH),
            "openai_responses": ("codex.jsonl", RESPONSES_PATH)}


def replay_recorded(door: str, base: str, upstream: DoorUpstream, http: httpx.Client,
                    settle: Callable[[], None]) -> dict[str, Any]:
    """A recorded session (Claude Code's or Codex's) through memd to an upstream that
    computes its prompt cache from what arrives, each reply the one the recording's next
    request holds: the prefix share and the cache read per call, and whether memd's call
    log holds the figures the upstream reported."""
    name, path = RECORDED[door]
    records = recorded(name)
    bodies = [r["body"] for r in records]
    upstream.cache, upstream.usages = PromptCache(), []
    upstream.script(_replies(door, bodies))
    first = len(upstream.requests)
    ids = []
    for record in records:
        r = http.post(base + path, content=json.dumps(record["body"]), headers={
            **record["headers"], "x-api-key": "sk-ant-bench",
            "authorization": "Bearer sk-bench"})
        r.raise_for_status()
        ids.append(r.headers["x-memd-call"])
        settle()
    cache, upstream.cache = upstream.cache, None
    computed = upstream.usages
    calls = [http.get(f"{base}/v1/calls/{i}").json() for i in ids]
    logged = [c["metadata"]["usage"].get("cache_read_input_tokens") for c in calls]
    shares = [shared / size for shared, size in cache.shared[1:]]
    sent = upstream.requests[first:]
    return {"calls": len(sent), "turns": len({r["run"] for r in records}),
            "sessions": len({c["session_id"] for c in calls}),
            "prefix_share_per_call": [round(s, 4) for s in shares],
            "prefix_share_min": round(min(shares), 4),
            "cache_read_per_call": logged,
            "cache_read_share_per_call": [
                round((n or 0) / size, 4) for n, (_, size) in zip(
                    logged[1:], cache.shared[1:], strict=False)],
            "cache_logged_every_call": logged == [
                u["cache_read_input_tokens"] for u in computed] and len(logged) == len(sent)}
