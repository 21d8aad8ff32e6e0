"""memd.server.local_upstream: OpenAI's chat routes answered in process by the real
SmolLM2 helper model, read through httpx, the official ``openai`` client and memd's own
proxy."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.chat import ChatCompletionMessageParam

from memd.config import load_settings
from memd.engine.memory import Memd
from memd.errors import ModelError
from memd.models.helper import ChatMessage
from memd.models.llama_helper import LlamaHelper
from memd.server.app import create_app
from memd.server.local_upstream import LocalUpstreamTransport
from memd.server.windows import Window, WindowResolver

pytestmark = pytest.mark.real_model

BASE = "http://local/v1"
ASK = [{"role": "user", "content": "What is the capital of France?"}]
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": ASK[0]["content"]}]


@pytest.fixture(scope="module")
def helper() -> LlamaHelper:
    return LlamaHelper()


@pytest.fixture
def transport(helper: LlamaHelper) -> LocalUpstreamTransport:
    return LocalUpstreamTransport(helper, temperature=0.0)


def request(transport: httpx.AsyncBaseTransport, method: str, path: str,
            **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url=BASE + "/") as client:
            resp = await client.request(method, path, **kwargs)
            await resp.aread()
            return resp
    return asyncio.run(go())


def openai_client(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    # the SDK accepts httpx's own clients, though its types name only its fork, httpx2
    return openai.AsyncOpenAI(http_client=http, base_url=BASE,  # type: ignore[arg-type]
                              api_key="x", max_retries=0)


def events(resp: httpx.Response) -> list[Any]:
    """The data of each server-sent event; "[DONE]" stays a string."""
    out: list[Any] = []
    for block in resp.text.split("\n\n"):
        if block:
            assert block.startswith("data: "), block
            data = block[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_a_chat_completion_through_the_openai_client(transport: LocalUpstreamTransport,
                                                     helper: LlamaHelper) -> None:
    async def go() -> Any:
        async with httpx.AsyncClient(transport=transport) as http:
            client = openai_client(http)
            return await client.chat.completions.create(
                model="anything", messages=MESSAGES, max_tokens=16)

    done = asyncio.run(go())
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-")
    assert done.model == helper.model
    (choice,) = done.choices
    assert choice.message.role == "assistant" and (choice.message.content or "").strip()
    assert choice.finish_reason in ("stop", "length")
    assert done.usage is not None and done.usage.prompt_tokens > 0
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
    assert 0 < done.usage.completion_tokens <= 16


def test_a_streamed_chat_through_the_openai_client(transport: LocalUpstreamTransport) -> None:
    async def go() -> list[Any]:
        async with httpx.AsyncClient(transport=transport) as http:
            client = openai_client(http)
            stream = await client.chat.completions.create(
                model="anything", messages=MESSAGES, max_tokens=16,
                stream=True, stream_options={"include_usage": True})
            return [chunk async for chunk in stream]

    chunks = asyncio.run(go())
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert not chunks[-1].choices and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_the_stream_is_server_sent_events_ending_in_done(
        transport: LocalUpstreamTransport) -> None:
    resp = request(transport, "POST", "chat/completions", json={
        "model": "m", "messages": ASK, "max_tokens": 16, "stream": True})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/event-stream"
    got = events(resp)
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks).strip()


def test_pieces_are_sent_as_the_model_makes_them() -> None:
    """The event loop is free while the model runs, and each piece goes out on its own."""

    class Paced:
        name, model, context_length = "paced", "paced", None

        def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                   temperature: float = 0.0) -> Generator[str, None, None]:
            for piece in ("one ", "two ", "three"):
                yield piece
                time.sleep(0.2)  # blocking, as llama.cpp is

        def complete(self, *args: Any, **kwargs: Any) -> str:
            raise AssertionError("not used")

        def count_tokens(self, text: str) -> int:
            return len(text.split())

    async def go() -> tuple[list[tuple[float, str]], int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        loop = asyncio.get_running_loop()
        seen: list[tuple[float, str]] = []
        async with httpx.AsyncClient(transport=LocalUpstreamTransport(Paced()),
                                     base_url=BASE + "/") as client:
            body = {"messages": ASK, "stream": True}
            async with client.stream("POST", "chat/completions", json=body) as resp:
                async for chunk in resp.aiter_raw():
                    seen.append((loop.time(), chunk.decode()))
        ticker.cancel()
        return seen, ticks

    seen, ticks = asyncio.run(go())
    texts = [t for _, t in seen]
    assert any('"one "' in t for t in texts) and texts[-1] == "data: [DONE]\n\n"
    first = next(at for at, t in seen if '"one "' in t)
    assert seen[-1][0] - first >= 0.35  # "one " went out before the model finished
    assert ticks >= 30  # the loop ran on while the model slept


def test_a_stream_closed_early_frees_the_model(transport: LocalUpstreamTransport,
                                              helper: LlamaHelper) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(transport=transport, base_url=BASE + "/") as client:
            body = {"messages": ASK, "max_tokens": 32, "stream": True}
            async with client.stream("POST", "chat/completions", json=body) as resp:
                async for _ in resp.aiter_raw():
                    assert helper._load().lock.locked()
                    break  # the client goes away mid-answer

    asyncio.run(go())
    assert not helper._load().lock.locked()


def test_a_schema_in_response_format_constrains_the_answer(
        transport: LocalUpstreamTransport) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    resp = request(transport, "POST", "chat/completions", json={
        "model": "m", "messages": ASK, "max_tokens": 32,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "city", "schema": schema}}})
    assert resp.status_code == 200, resp.text
    answer = json.loads(resp.json()["choices"][0]["message"]["content"])
    assert set(answer) == {"city"} and isinstance(answer["city"], str)


def test_models_lists_the_helper(transport: LocalUpstreamTransport,
                                 helper: LlamaHelper) -> None:
    for path in ("models", "/models"):
        resp = request(transport, "GET", path)
        assert resp.status_code == 200
        assert resp.json()["object"] == "list"
        (entry,) = resp.json()["data"]
        assert (entry["id"], entry["object"], entry["owned_by"]) == (
            helper.model, "model", "llamacpp")


def test_memds_window_probe_finds_the_helpers_context_for_any_model_name(
        transport: LocalUpstreamTransport) -> None:
    async def go() -> list[Window]:
        async with httpx.AsyncClient(transport=transport, base_url=BASE + "/") as client:
            resolver = WindowResolver(load_settings(), client)
            return [await resolver.resolve(name, None) for name in ("smollm2", "gpt-4o")]

    assert [(w.tokens, w.source) for w in asyncio.run(go())] == [(2048, "upstream")] * 2


@pytest.mark.parametrize(("method", "path", "body", "status", "kind"), [
    ("GET", "/v1/nope", None, 404, "not_found_error"),
    ("GET", "/api/version", None, 404, "not_found_error"),
    ("GET", "chat/completions", None, 400, "invalid_request_error"),
    ("POST", "chat/completions", b"{not json", 400, "invalid_request_error"),
    ("POST", "chat/completions", b'{"messages": []}', 400, "invalid_request_error"),
    ("POST", "chat/completions", b'{"messages": [{"role": "wizard", "content": "hi"}]}',
     400, "invalid_request_error"),
    ("POST", "chat/completions",
     b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}',
     400, "invalid_request_error"),
])
def test_bad_requests_get_json_errors(transport: LocalUpstreamTransport, method: str,
                                      path: str, body: bytes | None, status: int,
                                      kind: str) -> None:
    resp = request(transport, method, path, content=body)
    assert resp.status_code == status
    assert resp.json()["error"]["type"] == kind
    assert resp.json()["error"]["message"]


def test_a_prompt_over_the_window_is_a_400_the_proxy_recognizes(
        transport: LocalUpstreamTransport) -> None:
    for stream in (False, True):
        resp = request(transport, "POST", "chat/completions", json={
            "messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 8,
            "stream": stream})
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "context_length_exceeded"


def test_a_failing_helper_is_a_500_model_error() -> None:
    class Broken(LlamaHelper):
        def complete(self, *args: Any, **kwargs: Any) -> str:
            raise ModelError("the helper model fell over")

        def stream(self, *args: Any, **kwargs: Any) -> Generator[str, None, None]:
            raise ModelError("the helper model fell over")
            yield ""

    resp = request(LocalUpstreamTransport(Broken()), "POST", "chat/completions",
                   json={"messages": ASK})
    assert resp.status_code == 500
    assert resp.json()["error"] == {"type": "model_error",
                                    "message": "the helper model fell over"}


def test_messages_reach_the_helper_as_plain_text() -> None:
    got: list[Sequence[Mapping[str, str]]] = []

    class Recorder(LlamaHelper):
        def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                   temperature: float = 0.0) -> Generator[str, None, None]:
            got.append(messages)
            yield "ok"

        def count_tokens(self, text: str) -> int:
            return 1

    resp = request(LocalUpstreamTransport(Recorder()), "POST", "chat/completions", json={
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                         {"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        ]})
    assert resp.status_code == 200, resp.text
    assert [dict(m) for m in got[0]] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Look:\n[attachment]"},
        {"role": "assistant", "content": "Tool call: ls({})"},
        {"role": "user", "content": "Tool result:\na.txt"},
    ]


def test_memd_serves_chat_with_the_local_model(engine: Memd,
                                               transport: LocalUpstreamTransport) -> None:
    settings = replace(engine.settings, upstream_url=BASE)
    app = create_app(engine, settings, run_jobs=False, upstream_transport=transport)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        resp = client.post("/v1/chat/completions", json={
            "model": "smollm2", "messages": ASK, "max_tokens": 16})
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"].strip()
        call = client.get(f"/v1/calls/{resp.headers['x-memd-call']}").json()
        assert call["status"] == 200
        assert call["report"]["window"]["tokens"] == 2048  # asked of the local upstream
        with client.stream("POST", "/v1/chat/completions", json={
                "model": "smollm2", "messages": ASK, "max_tokens": 16,
                "stream": True}) as streamed:
            body = "".join(streamed.iter_text())
        assert streamed.status_code == 200 and body.endswith("data: [DONE]\n\n")
        models = client.get("/v1/models").json()
        assert models["data"][0]["id"] == "SmolLM2-135M-Instruct"
