"""The Ollama door (``/api/chat``) in the doors' benchmark (:mod:`bench.bench_doors`):
the latency it adds to a tool-using chat client's calls, measured as the other doors'.

The session is shaped like Continue's agent mode on its ``ollama`` provider: a system
prompt, the tools as Ollama takes them, tool calls whose arguments are JSON objects,
``tool`` messages with ``tool_name``, ``options.num_ctx`` set, NDJSON streamed back;
it grows step by step (file reads, a new user turn every few steps) to about the target
size, as the other doors' sessions do.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bench.bench_doors import FINAL, PROMPTS, DoorStep, DoorUpstream, grow

PATH = "/api/chat"
MODEL = "qwen3-coder:30b"
SYSTEM = ("You are an expert software developer. You give helpful and concise responses. "
          "Use the tools you are given to read the project before you answer.")
TOOLS = [{"type": "function", "function": {
    "name": name, "description": text, "parameters": {
        "type": "object", "required": ["filepath"],
        "properties": {"filepath": {"type": "string", "description": "the file's path"}}}}}
    for name, text in (("read_file", "Read a file of the project"),
                       ("view_subdirectory", "List a folder of the project"),
                       ("read_currently_open_file", "Read the file open in the editor"))]


def prompt_bytes(body: dict[str, Any]) -> bytes:
    """A request's prompt as Ollama's prompt cache sees it: tools, then the messages
    (left open at the end, so a request that only adds messages extends it)."""
    return json.dumps(body.get("tools")).encode() + json.dumps(body["messages"]).encode()[:-1]


def ollama_session(target_tokens: int, seed: int) -> list[DoorStep]:
    """A Continue-shaped session through ``/api/chat`` growing to about
    ``target_tokens`` (see the module docstring)."""
    base = {"model": MODEL, "tools": TOOLS, "options": {"num_ctx": 131072,
                                                         "temperature": 0.2},
            "keep_alive": "30m"}
    history: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPTS[seed % len(PROMPTS)]}]
    steps: list[DoorStep] = []

    def body(new_words: bool) -> int:
        steps.append(DoorStep({**base, "messages": list(history)}, [], new_words))
        return len(json.dumps(steps[-1].body))

    def reply(message: dict[str, Any]) -> None:
        steps[-1] = DoorStep(steps[-1].body, [message], steps[-1].new_words)
        history.append(message)

    def tool_step(n: int, path: str, text: str) -> int:
        reply({"role": "assistant", "content": "", "tool_calls": [{"function": {
            "name": "read_file", "arguments": {"filepath": path}}}]})
        history.append({"role": "tool", "content": text, "tool_name": "read_file"})
        return body(False)

    def user_turn(n: int, prompt: str) -> int:
        reply({"role": "assistant", "content": FINAL})
        history.append({"role": "user", "content": prompt})
        return body(True)

    grow(target_tokens, seed, lambda: body(True), tool_step, user_turn)
    reply({"role": "assistant", "content": FINAL})
    return steps


async def _lines(model: str, message: dict[str, Any]) -> AsyncIterator[bytes]:
    """An answer as Ollama streams it: the message, then the last line with timings."""
    head = {"model": model, "created_at": "2026-01-01T00:00:00Z"}
    yield json.dumps({**head, "message": message, "done": False}).encode() + b"\n"
    yield json.dumps({**head, "message": {"role": "assistant", "content": ""}, "done": True,
                      "done_reason": "stop", "total_duration": 1000, "load_duration": 10,
                      "prompt_eval_count": 10, "prompt_eval_duration": 100,
                      "eval_count": 9, "eval_duration": 900}).encode() + b"\n"


class OllamaDoorUpstream(DoorUpstream):
    """:class:`DoorUpstream` that also answers ``/api/chat``, streaming unless the
    request says ``"stream": false`` (a scripted reply is the assistant message)."""

    def __init__(self) -> None:
        super().__init__()
        self.app.router.routes.append(Route(PATH, self.chat, methods=["POST"]))

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        reply = self._next(body)[0]
        message = reply if "role" in reply else {"role": "assistant", "content": FINAL}
        if body.get("stream") is False:
            return Response(json.dumps({"model": body.get("model"), "message": message,
                                        "done": True}), media_type="application/json")
        return StreamingResponse(_lines(str(body.get("model")), message),
                                 media_type="application/x-ndjson")


DOORS: dict[str, tuple[Callable[[int, int], list[DoorStep]], str,
                       Callable[[dict[str, Any]], bytes]]] = {
    "ollama_chat": (ollama_session, PATH, prompt_bytes)}
