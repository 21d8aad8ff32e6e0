"""memd.server.windows: where a model's context window comes from, against fake upstreams
that answer the way llama.cpp's server, vLLM, Ollama and LM Studio do, served in-process
through httpx's ASGITransport."""

from __future__ import annotations

import asyncio
import logging
import math
import tomllib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib import resources
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from memd.config import Settings
from memd.errors import InvalidInput
from memd.models.tokens import counter_for
from memd.server import windows
from memd.server.windows import CALIBRATION_TEXT, Window, WindowResolver, builtin_table

BASE = "http://upstream.test/v1/"


def one_token_per_3_chars(text: str) -> int:
    return math.ceil(len(text) / 3)


EXPECTED_RATIO = one_token_per_3_chars(CALIBRATION_TEXT) / counter_for("gpt-4").count(
    CALIBRATION_TEXT)


class Fake:
    """An upstream that counts the requests it gets (``hits["GET /props"]``) and can be
    made slow (``delay``) or to fail (``status`` for every request); ``state`` is what
    its handlers read that a test may change."""

    def __init__(self, routes: dict[str, Callable[[Request], Awaitable[Response]]],
                 state: dict[str, Any] | None = None) -> None:
        self.hits: Counter[str] = Counter()
        self.bodies: list[Any] = []
        self.delay = 0.0
        self.status: int | None = None
        self.state = state if state is not None else {}
        self.app = Starlette(routes=[
            Route(path.split(" ", 1)[1], self._handler(path, fn),
                  methods=[path.split(" ", 1)[0]])
            for path, fn in routes.items()
        ])

    def _handler(self, name: str, fn: Callable[[Request], Awaitable[Response]],
                 ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            self.hits[name] += 1
            if request.method == "POST":
                self.bodies.append(await request.json())
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.status is not None:
                return JSONResponse({"error": "unavailable"}, status_code=self.status)
            return await fn(request)
        return handle

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=BASE)


def llama_cpp(n_ctx: int = 32768, slots: int = 4) -> Fake:
    """llama-server -c n_ctx --parallel slots: /props reports the context of one slot."""

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": "../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "object": "model",
            "created": 1735142223, "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": 128256, "n_ctx_train": 131072,
                     "n_embd": 4096, "n_params": 8030261312, "size": 4912898304},
        }]})

    async def props(_: Request) -> Response:
        return JSONResponse({
            "default_generation_settings": {
                "id": 0, "id_task": -1, "n_ctx": n_ctx // slots, "speculative": False,
                "is_processing": False,
                "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95},
                "prompt": "",
                "next_token": {"has_next_token": True, "has_new_line": False,
                               "n_remain": -1, "n_decoded": 0, "stopping_word": ""},
            },
            "total_slots": slots,
            "model_path": "../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            "chat_template": "{{ messages }}",
            "modalities": {"vision": False},
            "build_info": "b5000-0123abcd",
        })

    async def tokenize(request: Request) -> Response:
        content = (await request.json())["content"]
        return JSONResponse({"tokens": list(range(one_token_per_3_chars(content)))})

    return Fake({"GET /v1/models": models, "GET /props": props, "POST /tokenize": tokenize})


def vllm(model: str = "Qwen/Qwen2.5-7B-Instruct", max_model_len: int = 16384) -> Fake:
    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": model, "object": "model", "created": 1735142223, "owned_by": "vllm",
            "root": model, "parent": None, "max_model_len": max_model_len,
            "permission": [{"id": "modelperm-1", "object": "model_permission",
                            "allow_sampling": True, "organization": "*"}],
        }]})

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        if body.get("model") != model:
            return JSONResponse({"object": "error", "message": "model not found",
                                 "type": "NotFoundError", "code": 404}, status_code=404)
        n = one_token_per_3_chars(body["prompt"])
        return JSONResponse({"count": n, "max_model_len": max_model_len,
                             "tokens": list(range(n)), "token_strs": None})

    return Fake({"GET /v1/models": models, "POST /tokenize": tokenize})


def ollama(num_ctx: int | None = None, loaded: int | None = None,
           version: str = "0.12.3") -> Fake:
    """Ollama with llama3.1:8b pulled; ``num_ctx`` set in its Modelfile parameters,
    ``loaded`` the context it runs with now (None: not loaded)."""
    parameters = ('stop                           "<|start_header_id|>"\n'
                  'stop                           "<|eot_id|>"')
    if num_ctx is not None:
        parameters += f"\nnum_ctx                        {num_ctx}"
    state: dict[str, Any] = {"loaded": loaded}

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": "llama3.1:8b", "object": "model", "created": 1735142223,
             "owned_by": "library"}]})

    async def api_version(_: Request) -> Response:
        return JSONResponse({"version": version})

    async def show(request: Request) -> Response:
        body = await request.json()
        if (body.get("model") or body.get("name")) != "llama3.1:8b":
            return JSONResponse({"error": "model 'x' not found"}, status_code=404)
        return JSONResponse({
            "license": "LLAMA 3.1 COMMUNITY LICENSE AGREEMENT",
            "modelfile": "FROM /root/.ollama/models/blobs/sha256-667b",
            "parameters": parameters,
            "template": "{{ .Prompt }}",
            "details": {"parent_model": "", "format": "gguf", "family": "llama",
                        "families": ["llama"], "parameter_size": "8.0B",
                        "quantization_level": "Q4_K_M"},
            "model_info": {"general.architecture": "llama", "general.parameter_count": 8030261248,
                           "llama.context_length": 131072, "llama.embedding_length": 4096,
                           "llama.block_count": 32},
            "capabilities": ["completion", "tools"],
            "modified_at": "2025-06-01T10:00:00.000000000Z",
        })

    async def ps(_: Request) -> Response:
        running = [] if state["loaded"] is None else [{
            "name": "llama3.1:8b", "model": "llama3.1:8b", "size": 6654289920,
            "digest": "46e0c10c039e", "details": {"format": "gguf", "family": "llama"},
            "expires_at": "2025-06-01T10:05:00Z", "size_vram": 6654289920,
            "context_length": state["loaded"]}]
        return JSONResponse({"models": running})

    async def not_found(_: Request) -> Response:
        return PlainTextResponse("404 page not found", status_code=404)

    return Fake({"GET /v1/models": models, "GET /api/version": api_version,
                 "POST /api/show": show, "GET /api/ps": ps, "GET /props": not_found},
                state)


def lm_studio() -> Fake:
    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": "qwen2.5-7b-instruct", "object": "model", "owned_by": "organization_owner"},
            {"id": "meta-llama-3.1-8b-instruct", "object": "model",
             "owned_by": "organization_owner"}]})

    async def v0_models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": "qwen2.5-7b-instruct", "object": "model", "type": "llm",
             "publisher": "lmstudio-community", "arch": "qwen2", "compatibility_type": "gguf",
             "quantization": "Q4_K_M", "state": "loaded", "max_context_length": 32768,
             "loaded_context_length": 4096},
            {"id": "meta-llama-3.1-8b-instruct", "object": "model", "type": "llm",
             "publisher": "lmstudio-community", "arch": "llama", "compatibility_type": "gguf",
             "quantization": "Q4_K_M", "state": "not-loaded", "max_context_length": 131072}]})

    return Fake({"GET /v1/models": models, "GET /api/v0/models": v0_models})


def llama_cpp_python(n_ctx: int = 2048) -> Fake:
    """python -m llama_cpp.server --n_ctx n_ctx: its model listing and schema say
    nothing of the context; a prompt that does not fit is refused before evaluation."""
    alias = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": alias, "object": "model", "owned_by": "me", "permissions": []}]})

    async def schema(_: Request) -> Response:
        return JSONResponse({"openapi": "3.1.0", "info": {
            "title": "\N{LLAMA} llama.cpp Python API", "version": "0.3.16"}, "paths": {}})

    async def completions(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        tokens = len(prompt.split()) + 1  # and the BOS token
        if tokens >= n_ctx:
            return JSONResponse({"error": {
                "message": f"This model's maximum context length is {n_ctx} tokens, however "
                           f"you requested {tokens + 1} tokens ({tokens} in your prompt; 1 "
                           "for the completion). Please reduce your prompt; or completion "
                           "length.", "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}, status_code=400)
        return JSONResponse({"object": "text_completion",
                             "choices": [{"text": "x", "index": 0}]})

    return Fake({"GET /v1/models": models, "GET /openapi.json": schema,
                 "POST /v1/completions": completions})


def generic() -> Fake:
    """A hosted OpenAI-compatible service whose model list carries context_length."""

    async def models(_: Request) -> Response:
        return JSONResponse({"data": [
            {"id": "acme/big-model", "name": "Acme: Big", "context_length": 65536},
            {"id": "acme/other", "name": "Acme: Other", "context_length": 4096}]})

    return Fake({"GET /v1/models": models})


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro
    return asyncio.run(main())


async def background_probes() -> None:
    """Wait for the probes the resolver started in the background (every task of the
    loop but the caller's) to finish; fails if none was started."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    assert others, "no background probe was started"
    await asyncio.wait_for(asyncio.gather(*others), timeout=30)


def settings(**kw: Any) -> Settings:
    return replace(Settings(), **kw)


async def resolve(fake: Fake | None, model: str | None, header: str | None = None,
                  **kw: Any) -> Window:
    if fake is None:
        return await WindowResolver(settings(**kw), None).resolve(model, header)
    async with fake.client() as client:
        return await WindowResolver(settings(**kw), client).resolve(model, header)


# -- the order of the sources ---------------------------------------------------------

def test_header_beats_config_upstream_and_default() -> None:
    fake = llama_cpp()
    window = run(resolve(fake, "gpt-4o", "2048", context_windows={"gpt-4o": 999},
                         context_window=777))
    assert window == Window(2048, "header", "X-Memd-Context-Window")
    assert not fake.hits


@pytest.mark.parametrize("value", ["", " ", "abc", "0", "-5", "+3", "1e5", "12.5", "٣",
                                   "99999999999"])
def test_invalid_header_is_invalid_input(value: str) -> None:
    with pytest.raises(InvalidInput, match="X-Memd-Context-Window"):
        run(resolve(None, "gpt-4o", value))


def test_config_beats_upstream_without_asking_it() -> None:
    fake = llama_cpp()
    window = run(resolve(fake, "my-local", None, context_windows={"my-*": 2048}))
    assert window == Window(2048, "config", "my-*")
    assert not fake.hits


def test_upstream_beats_builtin() -> None:
    window = run(resolve(llama_cpp(n_ctx=16384, slots=1), "gpt-4o", None))
    assert (window.tokens, window.source) == (16384, "upstream")


def test_builtin_beats_default() -> None:
    assert run(resolve(None, "gpt-4o", None, context_window=3000)) == Window(
        128000, "builtin", "gpt-4o*")


def test_default_beats_unknown_and_unknown_last() -> None:
    assert run(resolve(None, "my-own-model", None, context_window=3000)) == Window(
        3000, "default", "--context-window")
    assert run(resolve(None, "my-own-model", None)) == Window(None, "unknown")
    assert run(resolve(None, None, None)) == Window(None, "unknown")


# -- patterns ---------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "tokens"), [
    ("gpt-4o-mini", 3),        # an exact name beats every glob
    ("GPT-4O-MINI", 3),        # without regard to case
    ("gpt-4o-2024-08-06", 1),  # the longest glob
    ("gpt-4-turbo", 2),
    ("something-else", 4),
    ("openai/gpt-4o-mini", 3),  # the provider prefix is dropped
])
def test_config_pattern_specificity(model: str, tokens: int) -> None:
    table = {"*": 4, "gpt-4*": 2, "gpt-4o*": 1, "gpt-4o-mini": 3}
    assert run(resolve(None, model, None, context_windows=table)).tokens == tokens


@pytest.mark.parametrize(("model", "tokens"), [
    ("gpt-4o", 128000), ("openai/gpt-4o-mini", 128000), ("gpt-4", 8192),
    ("gpt-4-0613", 8192), ("gpt-4-turbo", 128000), ("gpt-3.5-turbo", 16385),
    ("gpt-4.1", 1047576), ("o1", 200000), ("o3-mini", 200000), ("o4-mini", 200000),
    ("gpt-5", 400000), ("claude-3-5-sonnet-20241022", 200000),
    ("anthropic/claude-sonnet-4-20250514", 200000), ("gemini-1.5-pro", 2097152),
    ("claude-opus-4-1-20250805", 200000), ("claude-haiku-4-5", 200000),
    ("claude-3-7-sonnet-latest", 200000), ("claude-instant-1.2", 100000),
    ("gpt-5-codex", 400000), ("gpt-5.1-codex-max", 400000), ("gpt-5-mini", 400000),
    ("gpt-5.1-chat-latest", 128000), ("codex-mini-latest", 200000), ("o3-pro", 200000),
    ("o4-mini-deep-research", 200000),
    ("gemini-2.0-flash", 1048576), ("llama3", 8192), ("llama3:70b", 8192),
    ("ollama/llama3.1:8b", 131072), ("meta-llama/Llama-3.3-70B-Instruct", 131072),
    ("meta-llama/Meta-Llama-3-8B-Instruct", 8192), ("qwen2.5:7b", 32768),
    ("Qwen/Qwen3-8B", 32768), ("mistral", 32768), ("mixtral:8x7b", 32768),
    ("deepseek-r1:14b", 131072), ("deepseek-coder:6.7b", 16384), ("gemma2:9b", 8192),
    ("gemma3:27b", 131072), ("gemma3:1b", 32768), ("phi3", 4096),
    ("microsoft/Phi-3-mini-128k-instruct", 131072), ("phi4", 16384),
    ("smollm2:1.7b", 8192), ("HuggingFaceTB/SmolLM2-360M-Instruct", 8192),
])
def test_builtin_known_models(model: str, tokens: int) -> None:
    window = run(resolve(None, model, None))
    assert (window.tokens, window.source) == (tokens, "builtin")


def test_builtin_unknown_model_is_not_matched() -> None:
    assert run(resolve(None, "totally-new-model", None)).source == "unknown"


def test_builtin_data_file_parses_with_positive_ints() -> None:
    text = resources.files("memd").joinpath("data", "context_windows.toml").read_text("utf-8")
    raw = tomllib.loads(text)
    assert len(raw) > 50
    for pattern, tokens in raw.items():
        assert type(tokens) is int and tokens > 0, pattern
    assert builtin_table() == raw


# -- each upstream kind -------------------------------------------------------------------

def test_llama_cpp_window_is_one_slot_of_props() -> None:
    window = run(resolve(llama_cpp(n_ctx=32768, slots=4), "anything", None))
    assert window.tokens == 8192
    assert window.source == "upstream" and "/props" in window.detail


def test_llama_cpp_python_window_is_the_one_its_refusal_states() -> None:
    fake = llama_cpp_python(n_ctx=2048)
    window = run(resolve(fake, "/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert window == Window(2048, "upstream",
                            "llama-cpp-python's refusal of an over-long prompt")
    assert fake.hits["POST /v1/completions"] == 1
    assert fake.bodies[0]["max_tokens"] == 1


def test_llama_cpp_python_over_the_probe_leaves_the_window_to_the_other_sources() -> None:
    fake = llama_cpp_python(n_ctx=windows._PROBE_TOKENS + 10)
    window = run(resolve(fake, "smollm2-135m", context_window=3000))
    assert window.source == "builtin" and fake.hits["POST /v1/completions"] == 1


def test_a_listing_owned_by_me_alone_is_not_llama_cpp_python() -> None:
    fake = llama_cpp_python()
    fake.app.router.routes = [r for r in fake.app.router.routes
                              if getattr(r, "path", "") != "/openapi.json"]
    assert run(resolve(fake, "some-model")) == Window(None, "unknown")
    assert fake.hits["POST /v1/completions"] == 0


@pytest.mark.parametrize(("refusal", "tokens"), [
    (b'{"error":{"code":400,"type":"exceed_context_size_error","n_prompt_tokens":5000,'
     b'"n_ctx":4096,"message":"the request exceeds the available context size"}}', 4096),
    (b"This model's maximum context length is 8192 tokens. However, you requested", 8192),
    (b"Requested tokens (5001) exceed context window of 2048", 2048),
    (b'{"error": {"message": "prompt is too long"}}', None),
    (b"maximum context length is 0 tokens", None),
])
def test_the_window_a_refusal_states(refusal: bytes, tokens: int | None) -> None:
    assert windows.stated_window(refusal) == tokens


def test_a_learned_window_is_used_without_asking_the_upstream() -> None:
    fake = generic()

    async def main() -> tuple[Window, int | None]:
        async with fake.client() as client:
            resolver = WindowResolver(settings(), client)
            learned = resolver.learn("acme/big-model",
                                     b"maximum context length is 16384 tokens")
            return await resolver.resolve("acme/big-model", None), learned

    window, learned = run(main())
    assert learned == 16384
    assert window == Window(16384, "upstream", "the model server's refusal")
    assert fake.hits["GET /v1/models"] == 0


def test_vllm_max_model_len() -> None:
    fake = vllm(max_model_len=16384)
    window = run(resolve(fake, "Qwen/Qwen2.5-7B-Instruct", None))
    assert (window.tokens, window.source) == (16384, "upstream")
    assert "max_model_len" in window.detail


def test_vllm_unknown_model_falls_back_to_builtin() -> None:
    window = run(resolve(vllm(), "gpt-4o", None))
    assert (window.tokens, window.source) == (128000, "builtin")


def test_ollama_num_ctx_parameter() -> None:
    fake = ollama(num_ctx=8192)
    window = run(resolve(fake, "llama3.1:8b", None))
    assert (window.tokens, window.source) == (8192, "upstream")
    assert "num_ctx" in window.detail
    assert {"model": "llama3.1:8b", "name": "llama3.1:8b"} in fake.bodies


def test_ollama_loaded_context_wins() -> None:
    window = run(resolve(ollama(num_ctx=8192, loaded=32768), "llama3.1:8b", None))
    assert (window.tokens, window.detail) == (32768, "Ollama /api/ps context_length")


@pytest.mark.parametrize(("version", "tokens"), [("0.12.3", 4096), ("0.5.7", 2048)])
def test_ollama_without_num_ctx_uses_the_servers_default(version: str, tokens: int) -> None:
    window = run(resolve(ollama(version=version), "llama3.1:8b", None))
    assert (window.tokens, window.source) == (tokens, "upstream")


def test_ollama_unknown_model_falls_back_to_builtin() -> None:
    window = run(resolve(ollama(), "gemma3:27b", None))
    assert (window.tokens, window.source) == (131072, "builtin")


def test_ollama_default_is_asked_again_once_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ollama()

    async def main() -> list[int | None]:
        async with fake.client() as client:
            resolver = WindowResolver(settings(), client)
            first = await resolver.resolve("llama3.1:8b", None)
            # the model is loaded with 16k now, and the retry interval has passed
            fake.state["loaded"] = 16384
            monkeypatch.setattr(windows, "RETRY_SECONDS", 0.0)
            stale = await resolver.resolve("llama3.1:8b", None)  # refreshes in background
            await background_probes()
            fresh = await resolver.resolve("llama3.1:8b", None)
            return [first.tokens, stale.tokens, fresh.tokens]

    assert run(main()) == [4096, 4096, 16384]


def test_lm_studio_prefers_the_loaded_context() -> None:
    loaded = run(resolve(lm_studio(), "qwen2.5-7b-instruct", None))
    assert (loaded.tokens, loaded.detail) == (4096, "LM Studio loaded_context_length")
    unloaded = run(resolve(lm_studio(), "meta-llama-3.1-8b-instruct", None))
    assert (unloaded.tokens, unloaded.detail) == (131072, "LM Studio max_context_length")


def test_generic_models_listing_context_length() -> None:
    fake = generic()
    window = run(resolve(fake, "acme/big-model", None))
    assert (window.tokens, window.source) == (65536, "upstream")
    assert set(fake.hits) == {"GET /v1/models"}  # recognised without probing other paths


# -- probing once, failures -----------------------------------------------------------------

def test_concurrent_first_calls_share_one_probe() -> None:
    fake = llama_cpp()
    fake.delay = 0.02

    async def main() -> list[Window]:
        async with fake.client() as client:
            resolver = WindowResolver(settings(), client)
            first = await asyncio.gather(*(resolver.resolve("m", None) for _ in range(50)))
            later = [await resolver.resolve("m", None) for _ in range(10)]
            return [*first, *later]

    results = run(main())
    assert {w.tokens for w in results} == {8192}
    assert fake.hits == Counter({"GET /v1/models": 1, "GET /props": 1})


def test_failing_upstream_logged_once_then_builtin(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ConnectError("connection refused", request=request)

    async def main() -> list[Window]:
        transport = httpx.MockTransport(refuse)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            resolver = WindowResolver(settings(), client)
            return [await resolver.resolve("gpt-4o", None) for _ in range(5)]

    with caplog.at_level(logging.DEBUG, logger="memd.windows"):
        results = run(main())
    assert all(w == Window(128000, "builtin", "gpt-4o*") for w in results)
    assert calls == ["/v1/models"]  # not asked again within the retry interval
    warnings = [r for r in caplog.records
                if r.name == "memd.windows" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "connection refused" in warnings[0].getMessage()


def test_server_error_is_a_failure_not_another_kind(caplog: pytest.LogCaptureFixture) -> None:
    fake = llama_cpp()
    fake.status = 503  # llama.cpp answers 503 while it loads the model
    with caplog.at_level(logging.WARNING, logger="memd.windows"):
        window = run(resolve(fake, "gpt-4o", None))
    assert window.source == "builtin"
    assert sum(fake.hits.values()) == 1
    assert [r.levelno for r in caplog.records if r.name == "memd.windows"] == [logging.WARNING]


def test_slow_upstream_times_out_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = llama_cpp()
    fake.delay = 5.0

    async def main() -> tuple[list[Window], list[int]]:
        async with fake.client() as client:
            resolver = WindowResolver(settings(upstream_probe_timeout=0.1), client)
            results, asked = [], []
            for _ in range(3):
                results.append(await resolver.resolve("llama3.1:8b", None))
                asked.append(sum(fake.hits.values()))
            return results, asked

    with caplog.at_level(logging.WARNING, logger="memd.windows"):
        results, asked = run(main())
    # The upstream would answer after 5 s: a builtin window means the probe gave up
    # first; the later calls do not ask again.
    assert all(w == Window(131072, "builtin", "llama3.1*") for w in results)
    assert asked[0] >= 1 and asked == [asked[0]] * 3, asked
    messages = [r.getMessage() for r in caplog.records if r.name == "memd.windows"]
    assert len(messages) == 1 and "no answer within 0.1 s" in messages[0]


def test_failure_is_retried_after_the_interval(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    fake = llama_cpp(n_ctx=4096, slots=1)
    fake.status = 500

    async def main() -> list[Window]:
        async with fake.client() as client:
            resolver = WindowResolver(settings(), client)
            first = await resolver.resolve("gpt-4o", None)
            fake.status = None
            monkeypatch.setattr(windows, "RETRY_SECONDS", 0.0)
            cached = await resolver.resolve("gpt-4o", None)  # starts the retry
            await background_probes()
            retried = await resolver.resolve("gpt-4o", None)
            return [first, cached, retried]

    with caplog.at_level(logging.WARNING, logger="memd.windows"):
        first, cached, retried = run(main())
    assert first.source == cached.source == "builtin"
    assert (retried.tokens, retried.source) == (4096, "upstream")
    assert len([r for r in caplog.records if r.name == "memd.windows"]) == 1


def test_forget_asks_again() -> None:
    fake = llama_cpp()

    async def main() -> None:
        async with fake.client() as client:
            resolver = WindowResolver(settings(), client)
            await resolver.resolve("m", None)
            resolver.forget()
            await resolver.resolve("m", None)

    run(main())
    assert fake.hits["GET /props"] == 2


def test_api_key_is_sent_to_the_upstream() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"data": [{"id": "m", "context_length": 1000}]})

    async def main() -> Window:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            resolver = WindowResolver(settings(upstream_api_key="sk-test"), client)
            return await resolver.resolve("m", None)

    assert run(main()).tokens == 1000
    assert seen == ["Bearer sk-test"]


# -- token ratio ----------------------------------------------------------------------------

async def ratio(fake: Fake | None, model: str | None, times: int = 1) -> float | None:
    if fake is None:
        return await WindowResolver(settings(), None).token_ratio(model)
    async with fake.client() as client:
        resolver = WindowResolver(settings(), client)
        results = [await resolver.token_ratio(model) for _ in range(times)]
    assert len(set(results)) == 1
    return results[0]


def test_token_ratio_llama_cpp() -> None:
    fake = llama_cpp()
    assert run(ratio(fake, "m", times=3)) == pytest.approx(EXPECTED_RATIO)
    assert fake.hits["POST /tokenize"] == 1
    assert fake.bodies == [{"content": CALIBRATION_TEXT}]


def test_token_ratio_vllm() -> None:
    fake = vllm()
    assert run(ratio(fake, "Qwen/Qwen2.5-7B-Instruct", times=3)) == pytest.approx(
        EXPECTED_RATIO)
    assert fake.hits["POST /tokenize"] == 1
    assert fake.bodies[0]["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert fake.bodies[0]["prompt"] == CALIBRATION_TEXT


def test_token_ratio_none_without_a_tokenizer() -> None:
    assert run(ratio(ollama(), "llama3.1:8b")) is None
    assert run(ratio(None, "gpt-4o")) is None
    assert run(ratio(vllm(), "not-served")) is None


def test_calibration_text_is_mixed_and_about_2000_chars() -> None:
    assert 1500 <= len(CALIBRATION_TEXT) <= 2500
    assert "def " in CALIBRATION_TEXT and '{"id":' in CALIBRATION_TEXT
    assert 1.0 < EXPECTED_RATIO < 2.0  # a sanity check of the fake tokenizer's premise


def test_a_counted_ratio_is_asked_once_and_a_failure_again_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A model server's own count (Anthropic's count_tokens) calibrates memd's counts:
    asked once per model; a server without one is not asked again, a failure is."""
    asked: list[str] = []

    async def count(text: str) -> int | None:
        asked.append(text)
        return 1 if text == "." else 2 * counter_for("gpt-4").count(text)

    async def none(text: str) -> int | None:
        asked.append(text)
        return None

    async def fails(text: str) -> int | None:
        asked.append(text)
        raise httpx.ConnectError("refused")

    async def scenario() -> list[float | None]:
        resolver = windows.WindowResolver(Settings(), None)
        return [await resolver.counted_ratio("claude-x", count),
                await resolver.counted_ratio("claude-x", count),
                await resolver.counted_ratio("claude-y", none),
                await resolver.counted_ratio("claude-y", none),
                await resolver.counted_ratio("claude-z", fails),
                await resolver.counted_ratio(None, count)]

    ratios = asyncio.run(scenario())
    assert ratios == [2.0, 2.0, None, None, None, None]
    assert asked == [windows.CALIBRATION_TEXT, ".", windows.CALIBRATION_TEXT,
                     windows.CALIBRATION_TEXT]
    monkeypatch.setattr(windows, "RETRY_SECONDS", 0.0)

    async def again() -> None:
        resolver = windows.WindowResolver(Settings(), None)
        assert await resolver.counted_ratio("claude-z", fails) is None
        assert await resolver.counted_ratio("claude-z", fails) is None  # asked anew
        await asyncio.sleep(0.01)

    asked.clear()
    asyncio.run(again())
    assert asked == [windows.CALIBRATION_TEXT, windows.CALIBRATION_TEXT]
