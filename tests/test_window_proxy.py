"""The proxy against the model's real window: memory only within the headroom, requests
over the window forwarded unchanged, a refusal as too long retried without memory, and
the window's source in the call report. A fake llama.cpp server (its /props, /tokenize
and context check) stands for a small local model."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from servers import FakeUpstream, memd_in_front
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memd.engine.block.inject import USER_OPEN
from memd.engine.memory import Memd


class LlamaCpp(FakeUpstream):
    """A llama.cpp server with a ``n_ctx``-token window whose tokenizer makes one token of
    every 3 characters of the prompt: it refuses a longer prompt as llama.cpp does."""

    def __init__(self, n_ctx: int) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.refused = 0
        self.app.router.routes[:0] = [
            Route("/props", self.props, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
        ]

    @staticmethod
    def prompt_tokens(body: dict[str, Any]) -> int:
        text = "".join(json.dumps(m.get("content"), ensure_ascii=False) + m["role"]
                       for m in body["messages"])
        return math.ceil(len(text) / 3)

    async def props(self, request: Request) -> Response:
        return JSONResponse({"default_generation_settings": {"n_ctx": self.n_ctx},
                             "total_slots": 1, "model_path": "/models/small.gguf"})

    async def tokenize(self, request: Request) -> Response:
        content = json.loads(await request.body())["content"]
        return JSONResponse({"tokens": list(range(math.ceil(len(content) / 3)))})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": "small", "object": "model", "owned_by": "llamacpp",
             "meta": {"n_ctx_train": 32768}}]})

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        n = self.prompt_tokens(body) + int(body.get("max_tokens") or 0)
        if n > self.n_ctx:
            self.refused += 1
            self.requests.append(body)
            return JSONResponse({"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": n,
                "n_ctx": self.n_ctx,
                "message": "the request exceeds the available context size, try "
                           "increasing it"}}, status_code=400)
        return await super().chat_body(request, body)


@dataclass
class Stack:
    base: str
    upstream: FakeUpstream
    engine: Memd

    def client(self, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key="sk-test", max_retries=0,
                             **kw)

    def call(self, call_id: str) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(f"{self.base}/v1/calls/{call_id}").json()
        return found


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Any]:
    """Starts memd in front of an upstream, with settings overridden."""
    numbers = itertools.count()
    with ExitStack() as opened:
        def start(upstream: FakeUpstream, **overrides: Any) -> Stack:
            data_dir = tmp_path / f"d{next(numbers)}"
            base, engine = opened.enter_context(
                memd_in_front(upstream.app, data_dir, **overrides))
            return Stack(base, upstream, engine)

        yield start


def _remember(stack: Stack, *texts: str) -> None:
    for text in texts:
        stack.engine.add(text, "local")


def _block(request: dict[str, Any]) -> str | None:
    for m in request["messages"]:
        if m["role"] == "user" and isinstance(m["content"], str) and m["content"].startswith(
                USER_OPEN):
            return m["content"]
    return None


FILLER = "Here is part of the build log: step ok, cache hit, linking done. "
#: These tests are about the window, not about relevance: every memory counts as related
#: to the request (memd.engine.retrieval.relevance), whatever the fake embedder's cosine says.
ALL_RELATED = {"sure_similarity": -1.0}
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def test_a_request_that_fits_a_small_local_model_still_works_and_memory_fits_too(
        make_stack: Any) -> None:
    up = LlamaCpp(n_ctx=2048)
    stack = make_stack(up, **ALL_RELATED)
    _remember(stack, "The user builds the project with CMake and Ninja on Linux.")
    client = stack.client()
    # about 1,700 of the server's tokens: room for a small memory block
    fits = [{"role": "user", "content": FILLER * 75 + " How do I build the project?"}]
    raw = client.chat.completions.with_raw_response.create(model="small", messages=fits,
                                                          max_tokens=100)
    assert raw.http_response.status_code == 200
    sent = up.requests[-1]
    assert up.prompt_tokens(sent) + 100 <= 2048 and up.refused == 0
    report = stack.call(raw.headers["x-memd-call"])["report"]
    assert report["window"]["tokens"] == 2048 and report["window"]["source"] == "upstream"
    assert report["token_scale"] != 1.0  # calibrated against the server's /tokenize
    assert "CMake and Ninja" in report["injected"]
    assert sent["messages"][0]["content"] == report["injected"] + fits[0]["content"]

    # 2,004 of the server's tokens with no response reserve given: it fits the server
    # by itself, so memd adds nothing and forwards it as sent
    exact = [{"role": "user", "content": "x" * (2004 * 3 - 20)}]
    assert up.prompt_tokens({"messages": exact}) <= 2048
    raw = client.chat.completions.with_raw_response.create(model="small", messages=exact)
    assert raw.http_response.status_code == 200 and up.requests[-1]["messages"] == exact
    report = stack.call(raw.headers["x-memd-call"])["report"]
    assert report["injected"] is None and report["tokens"]["memory"] == 0


def test_a_request_over_the_window_goes_out_unchanged_and_the_report_says_why(
        make_stack: Any) -> None:
    up = FakeUpstream()
    stack = make_stack(up, context_windows={"tiny-*": 1000})
    _remember(stack, "The user deploys with Kubernetes.")
    history = [{"role": "system", "content": "You are terse."},
               {"role": "user", "content": FILLER * 80 + " How do we deploy?"}]
    raw = stack.client().chat.completions.with_raw_response.create(model="tiny-1",
                                                                  messages=history)
    assert up.requests[-1]["messages"] == history
    report = stack.call(raw.headers["x-memd-call"])["report"]
    assert report["room"]["over_window"] is True
    assert report["window"] == {"tokens": 1000, "source": "config", "detail": "tiny-*"}
    assert "over the model's window" in report["reason"]


def test_a_refusal_as_too_long_is_retried_without_memory(make_stack: Any) -> None:
    up = LlamaCpp(n_ctx=2048)
    # memd is told a bigger window than the server really has: its block overflows
    stack = make_stack(up, context_windows={"small": 4096}, **ALL_RELATED)
    # all different: a block says each thing once
    _remember(stack, *[f"Service{i} deploys to cluster{i} with chart{i} on {DAYS[i % 7]}."
                       for i in range(40)])
    client = stack.client()
    ask = [{"role": "user", "content": FILLER * 85 + " How does the service deploy?"}]
    assert up.prompt_tokens({"messages": ask}) < 2048
    for stream in (False, True):
        before = len(up.requests)
        raw = client.chat.completions.with_raw_response.create(model="small", messages=ask,
                                                              stream=stream)
        assert raw.http_response.status_code == 200
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse()
                           if c.choices)
        else:
            text = raw.parse().choices[0].message.content or ""
        assert text.startswith("ok: " + FILLER)
        first, second = up.requests[before:]
        assert _block(first) is not None and second["messages"] == ask
        call = stack.call(raw.headers["x-memd-call"])
        assert call["metadata"]["retried"] is True and call["status"] == 200
        # the report says what the forwarded request carried: no memory
        report = call["report"]
        assert report["tokens"]["memory"] == 0 and report["dropped"]["tokens"] > 0
        assert report["blocks"] == [] and report["injected"] is None
    # an error that is not about length passes through, without a retry
    up.fail_with = 400
    before = len(up.requests)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="small", messages=[
            {"role": "user", "content": "How does the service deploy?"}])
    assert len(up.requests) == before + 1


def test_the_window_a_refusal_states_is_used_by_the_calls_after_it(make_stack: Any) -> None:
    up = LlamaCpp(n_ctx=2048)
    # a server that hides its context: only the training length is known (32768)
    up.app.router.routes = [r for r in up.app.router.routes
                            if getattr(r, "path", "") != "/props"]
    stack = make_stack(up, **ALL_RELATED)
    _remember(stack, *[f"Service{i} deploys to cluster{i} with chart{i} on {DAYS[i % 7]}."
                       for i in range(40)])
    client = stack.client()
    ask = [{"role": "user", "content": FILLER * 85 + " How does the service deploy?"}]
    windows = []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(model="small", messages=ask)
        assert raw.http_response.status_code == 200
        windows.append(stack.call(raw.headers["x-memd-call"])["report"]["window"])
    assert up.refused == 1  # the first call's block overflowed; the second fit
    assert windows[0]["tokens"] == 32768
    assert windows[1] == {"tokens": 2048, "source": "upstream",
                          "detail": "the model server's refusal"}


def test_the_window_header_wins_and_unknown_models_get_a_small_block(
        make_stack: Any) -> None:
    up = FakeUpstream()
    stack = make_stack(up, memory_unknown_window_tokens=120, **ALL_RELATED)
    # all different: a block says each thing once
    _remember(stack, *[f"Team{i} ships deploy service{i} on {DAYS[i % 7]} from branch{i}."
                       for i in range(30)])
    client = stack.client()
    ask = [{"role": "user", "content": "when does the deploy service ship?"}]
    raw = client.chat.completions.with_raw_response.create(model="no-such-model-xyz",
                                                          messages=ask)
    report = stack.call(raw.headers["x-memd-call"])["report"]
    assert report["window"]["source"] == "unknown" and report["window"]["tokens"] is None
    assert 0 < report["tokens"]["memory"] <= 120
    raw = client.chat.completions.with_raw_response.create(
        model="no-such-model-xyz",
        messages=[{"role": "user", "content": "which day does the team ship the deploy?"}],
        extra_headers={"X-Memd-Context-Window": "100000"})
    report = stack.call(raw.headers["x-memd-call"])["report"]
    assert report["window"]["tokens"] == 100000 and report["window"]["source"] == "header"
    assert 120 < report["tokens"]["memory"] <= 2000
    with pytest.raises(openai.BadRequestError, match="X-Memd-Context-Window"):
        client.chat.completions.create(model="m", messages=ask,
                                       extra_headers={"X-Memd-Context-Window": "lots"})
