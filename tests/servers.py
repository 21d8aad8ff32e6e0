"""Real HTTP servers for end-to-end tests: a fake OpenAI-compatible upstream that records
what it receives, and memd itself in front of one, each on uvicorn on a free loopback
port."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import memd
from memd.config import load_settings
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.server.later import Later


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run an ASGI app on uvicorn in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def postgres_url() -> str:
    """A database of the test run's PostgreSQL, migrated for the end-to-end tests."""
    from pg import database

    from memd.backends.postgres import PostgresStore

    def migrate(dsn: str) -> None:
        PostgresStore(dsn, dim=384, partitions=(4, 4, 4)).close()

    return database(key=("e2e", 384), setup=migrate)


def open_memd(data_dir: Path, backend: str = "sqlite", **overrides: Any) -> Memd:
    """memd over SQLite in ``data_dir``, or over a fresh database of the test run's
    PostgreSQL ("postgres"), its settings overridden by ``overrides``."""
    settings = replace(load_settings(data_dir=data_dir), **overrides)
    if backend == "postgres":
        settings = replace(settings, db=postgres_url(), pg_partitions=(4, 4, 4))
    return memd.open(settings=settings)


def user_with_key(engine: Memd, user: str) -> str:
    """Make ``user`` and an API key of theirs (team mode); returns the key."""
    from memd.auth import hash_key, key_id_of, new_key

    key, now = new_key(), time.time()
    engine.store.create_user(user, user.title(), now)
    engine.store.add_api_key(key_id_of(hash_key(key)), user, hash_key(key), "test", now)
    return key


@contextmanager
def memd_in_front(upstream_app: Any, data_dir: Path, backend: str = "sqlite",
                  **overrides: Any) -> Iterator[tuple[str, Memd]]:
    """The upstream app and memd (SQLite, or "postgres") in front of it, each on its own
    port, memd's settings overridden by ``overrides``; yields memd's base URL and engine."""
    with serve(upstream_app) as up:
        engine = open_memd(data_dir, backend, upstream_url=f"{up}/v1", job_interval=0.05,
                           **overrides)
        try:
            app = create_app(engine, engine.settings)
            with serve(app) as base:
                yield base, cast(Memd, Answered(engine, app.state.later))
        finally:
            engine.close()


class Answered:
    """The engine, read once memd has stored what the answers it gave leave to store
    (memd.server.later): a test reads the store as the client's next request would,
    not in the moment between an answer and its write."""

    def __init__(self, engine: Memd, later: Later) -> None:
        self._engine, self._later = engine, later

    def __getattr__(self, name: str) -> Any:
        deadline = time.monotonic() + 30
        while not self._later.idle and time.monotonic() < deadline:
            time.sleep(0.001)
        return getattr(self._engine, name)


class FakeUpstream:
    """A scripted OpenAI-compatible chat server (which also answers Anthropic Messages
    and OpenAI Responses requests with "ok").

    Every request body is recorded in ``requests``. Answers: a tool call when the request
    offers tools and the last message is the user's; otherwise "ok: <last user text>".
    With ``gate`` set, a stream sends its first chunk and then waits (up to 10 s) for the
    test to set the gate before sending the rest; ``released`` says whether it was set.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.raw: list[bytes] = []  # every request's body as it arrived
        self.gate: threading.Event | None = None
        self.released: bool | None = None
        self.fail_with: int | None = None
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completion, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
        ])

    async def _record(self, request: Request) -> dict[str, Any]:
        self.raw.append(await request.body())
        body: dict[str, Any] = json.loads(self.raw[-1])
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        return body

    async def messages(self, request: Request) -> Response:
        """An Anthropic Messages answer: "ok"."""
        body = await self._record(request)
        return JSONResponse({"id": "msg_1", "type": "message", "role": "assistant",
                             "model": body.get("model", "fake-model"),
                             "content": [{"type": "text", "text": "ok"}],
                             "stop_reason": "end_turn",
                             "usage": {"input_tokens": 5, "output_tokens": 1}})

    async def responses(self, request: Request) -> Response:
        """An OpenAI Responses answer: "ok"."""
        body = await self._record(request)
        return JSONResponse({"id": "resp_1", "object": "response", "status": "completed",
                             "model": body.get("model", "fake-model"), "output": [{
                                 "type": "message", "role": "assistant", "content": [
                                     {"type": "output_text", "text": "ok"}]}],
                             "usage": {"input_tokens": 5, "output_tokens": 1}})

    async def completion(self, request: Request) -> Response:
        """A text completion: "ok" after the prompt."""
        body = await self._record(request)
        return JSONResponse({"id": "cmpl-1", "object": "text_completion", "created": 1,
                             "model": body.get("model", "fake-model"),
                             "choices": [{"index": 0, "text": " ok", "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": 1,
                                       "total_tokens": 6}})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model",
                                                         "owned_by": "test"}]})

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if body.get("tools") and last["role"] == "user":
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_abc", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}
        users = [m for m in body["messages"] if m["role"] in ("user", "tool")]
        return {"role": "assistant", "content": f"ok: {users[-1]['content']}"}

    async def chat(self, request: Request) -> Response:
        self.raw.append(await request.body())
        return await self.chat_body(request, json.loads(self.raw[-1]))

    async def chat_body(self, request: Request, body: dict[str, Any]) -> Response:
        """Record ``body`` (the request's, parsed) and answer it."""
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.fail_with:
            return JSONResponse({"error": {"message": "upstream says no", "type": "x"}},
                                status_code=self.fail_with)
        answer = self._answer(body)
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if not body.get("stream"):
            return JSONResponse({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                "model": body.get("model", "fake-model"),
                "choices": [{"index": 0, "message": answer, "finish_reason": finish}],
                "usage": usage,
            })
        return StreamingResponse(self._chunks(body, answer, finish, usage),
                                 media_type="text/event-stream")

    async def _chunks(self, body: dict[str, Any], answer: dict[str, Any], finish: str,
                      usage: dict[str, Any]) -> AsyncIterator[bytes]:
        def event(delta: dict[str, Any], reason: str | None = None) -> bytes:
            chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                     "model": body.get("model", "fake-model"),
                     "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
            return f"data: {json.dumps(chunk)}\n\n".encode()

        yield event({"role": "assistant", "content": ""})
        if answer.get("tool_calls"):
            call = answer["tool_calls"][0]
            yield event({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"],
                                                      "arguments": ""}}]})
            yield event({"tool_calls": [{"index": 0, "function": {
                "arguments": call["function"]["arguments"]}}]})
        else:
            words = answer["content"].split(" ")
            yield event({"content": words[0]})
            if self.gate is not None:
                self.released = await asyncio.to_thread(self.gate.wait, 10)
            for w in words[1:]:
                yield event({"content": " " + w})
        yield event({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"


def wait_healthy(port: int, proc: subprocess.Popen[Any], timeout: float = 90) -> None:
    """Wait until the ``memd serve`` process ``proc`` answers /health on ``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the daemon did not start")


#: How long a test waits for a daemon to pick up a change to a watched file before it
#: fails: a functional timeout, not a speed target (bench/bench_watch.py times it).
WATCH_DEADLINE = 30.0


def poll(check: Callable[[], bool], what: str) -> float:
    """Seconds until ``check()`` holds; fails after WATCH_DEADLINE."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < WATCH_DEADLINE, \
            f"not within {WATCH_DEADLINE} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def wait_for_messages(engine: Memd, count: int, user_id: str = "local") -> None:
    """Wait until the user's sessions hold ``count`` messages: a proxied reply is stored
    as the answer is sent, so the client may have it a moment before the store does."""
    deadline = time.monotonic() + 10
    while sum(len(engine.messages(s.id, user_id))
              for s in engine.store.list_sessions(user_id)) < count:
        assert time.monotonic() < deadline, f"{count} messages not stored"
        time.sleep(0.02)
