"""The context window of the model a chat request names, and how its tokenizer compares
with memd's token counter.

The window comes from the first source that knows it: the request's
``X-Memd-Context-Window`` header, the config file's ``[context_windows]`` patterns, the
upstream server's own report about the model, the built-in table of model families
(``memd/data/context_windows.toml``), ``memd serve --context-window``; else it is unknown.

Asking the upstream must not slow the proxy down, so each model is asked about once: the
first call for a model waits for the answer (at most ``upstream_probe_timeout`` seconds),
concurrent first calls share that one probe, and later calls read the cached result. A
failed probe is logged once and counts as no answer; it is tried again, in the
background, at most every ``RETRY_SECONDS``, as is an answer that is only a stand-in for
the real one (a model the server has not loaded yet).

Which server the upstream is, is found out once, by trying in order (one request each,
cheapest first): ``GET {base}/models`` (vLLM's entries carry ``max_model_len``,
llama.cpp's are ``owned_by`` "llamacpp", other services put a ``context_length`` in
them), ``GET {root}/props`` (llama.cpp), ``GET {root}/api/version`` (Ollama),
``GET {root}/api/v0/models`` (LM Studio); a listing whose models are ``owned_by``
"me" is llama-cpp-python's server when its ``GET {root}/openapi.json`` says so.
``{root}`` is the OpenAI base URL without its trailing ``/v1``.

A model server that refuses a request as too long often states its window in the
refusal ("maximum context length is 2048 tokens"): the proxy hands that to
:meth:`WindowResolver.learn`, so only the first over-long request of a model is refused.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Generic, TypeVar

import httpx

from memd.config import Settings
from memd.errors import InvalidInput
from memd.models.tokens import counter_for
from memd.server import window_fields as wf

log = logging.getLogger("memd.windows")

HEADER = "X-Memd-Context-Window"
RETRY_SECONDS = 600.0
_MAX_HEADER_TOKENS = 1_000_000_000
# Ollama runs a model whose parameters set no num_ctx at its server-wide default, which
# OpenAI-compatible requests cannot change: 2048 before 0.6.7; 4096 since, and since
# 0.15.5 4096, 32768 or 262144 by the machine's VRAM, or OLLAMA_CONTEXT_LENGTH. None of
# that is visible over HTTP until the model is loaded (then /api/ps reports it), so the
# smallest default of the server's version stands in until then.
_OLLAMA_OLD_DEFAULT, _OLLAMA_DEFAULT, _OLLAMA_DEFAULT_SINCE = 2048, 4096, (0, 6, 7)
# llama-cpp-python's server reports its context size (--n_ctx, 2048 unless set; 0 means
# the model's training length) nowhere but in its refusal of a prompt that does not fit,
# which it gives after tokenizing and before evaluating anything. A prompt of this many
# tokens (" hi" is one token in BPE vocabularies) is refused by any context up to 128k,
# the training length of most local models, in well under a second.
_PROBE_TOKENS = 131_072
# How model servers state the window when they refuse a prompt as too long: OpenAI's
# wording (llama-cpp-python and vLLM use it), llama-cpp-python's own, and the n_ctx
# field of llama.cpp's exceed_context_size_error.
_STATED_WINDOW = re.compile(
    rb'maximum context length is (\d+)|exceeds? context window of (\d+)|"n_ctx": ?(\d+)',
    re.IGNORECASE)

# What the model's tokenizer and cl100k are both asked to count: prose, code and JSON,
# the mix a memory block and a coding agent's history hold.
CALIBRATION_TEXT = """\
Memory for assistants works best when it is boring. The daemon keeps what a user said
about their projects, the decisions they made and the reasons behind them, and it hands
the relevant part back when a new conversation starts. Nothing clever happens at read
time: the compiler ranks stored memories by similarity, keywords, freshness and how
often they helped before, then fits the best of them into the space the model has left.

When the window is small, every token matters. A local model with 8,192 tokens cannot
afford a 2,000-token memory block on top of a long tool result, so the budget is a share
of the window, and the window itself has to be right: too large and the server cuts the
prompt, too small and useful context stays on disk.

def fit(items: list[tuple[float, int]], budget: int) -> list[int]:
    \"\"\"Indexes of the best-scoring items whose token costs fit the budget.\"\"\"
    chosen, used = [], 0
    for index, (score, cost) in sorted(enumerate(items), key=lambda p: -p[1][0]):
        if used + cost <= budget:
            chosen.append(index)
            used += cost
    return sorted(chosen)

for path in sorted(Path("notes").glob("*.md")):
    text = path.read_text(encoding="utf-8")
    print(f"{path.name}: {len(text.split())} words")

$ memd serve --upstream-url http://127.0.0.1:8080/v1 --context-window 8192
INFO  memd.server listening on 127.0.0.1:8765 (store=sqlite, embedder=minilm-onnx)

{"id": "mem_01J9Z8K4", "kind": "decision", "importance": 0.8,
 "text": "Use PostgreSQL with pgvector for the team deployment; SQLite stays the default.",
 "entities": ["PostgreSQL", "pgvector", "SQLite"], "created_at": "2025-03-14T09:26:53Z",
 "source": {"session": "sess_7f3a", "message": 42}, "tags": ["storage", "deploy"]}

Numbers, names and punctuation tokenize differently from plain words: 3.14159, 0x7fff,
v2.3.1-rc4, O'Brien's café in Zürich (€12.50), and user@example.org all split in their
own ways, which is exactly why a ratio measured on a mixed sample beats a guess.
"""


@dataclass(frozen=True, slots=True)
class Window:
    """A model's context window in tokens (None: unknown) and where it came from."""

    tokens: int | None
    source: str  # "header" | "config" | "upstream" | "builtin" | "default" | "unknown"
    detail: str = ""  # the matched pattern, the upstream field; shown in the call report


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Probed(Generic[T]):
    value: T | None  # None: the upstream has no answer
    final: bool = True  # False: a failure or a stand-in, asked again after RETRY_SECONDS


class _OncePerKey(Generic[T]):
    """Runs ``probe(key)`` once per key and caches the result; concurrent first callers
    share one task. A result that is not final is refreshed in the background at most
    every RETRY_SECONDS while callers keep getting the cached value."""

    def __init__(self, probe: Callable[[str], Awaitable[_Probed[T]]]) -> None:
        self._probe = probe
        self._known: dict[str, tuple[_Probed[T], float]] = {}
        self._running: dict[str, asyncio.Task[_Probed[T]]] = {}

    async def get(self, key: str) -> T | None:
        known = self._known.get(key)
        if known is None:
            # shield: a caller that gives up does not cancel the probe the others await
            return (await asyncio.shield(self._start(key))).value
        probed, at = known
        if not probed.final and time.monotonic() - at >= RETRY_SECONDS:
            self._start(key)
        return probed.value

    def _start(self, key: str) -> asyncio.Task[_Probed[T]]:
        task = self._running.get(key)
        if task is None:
            task = self._running[key] = asyncio.create_task(self._run(key))
        return task

    async def _run(self, key: str) -> _Probed[T]:
        try:
            probed = await self._probe(key)
        finally:
            self._running.pop(key, None)
        self._known[key] = (probed, time.monotonic())
        return probed

    def put(self, key: str, probed: _Probed[T]) -> None:
        """Know ``probed`` for ``key`` from now on, as if a probe had answered it."""
        self._known[key] = (probed, time.monotonic())

    def clear(self) -> None:
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        self._known.clear()


@dataclass
class _Server:
    """What the upstream turned out to be, with the listings read while finding out."""

    kind: str  # "llama.cpp", "llama-cpp-python", "vllm", "ollama", "lmstudio", "generic"
    models: list[dict[str, Any]] = field(default_factory=list)  # GET {base}/models data
    version: str = ""  # Ollama's /api/version


class WindowResolver:
    """Finds the context window of the model a request names (see the module docstring).

    ``client`` is an ``httpx.AsyncClient`` whose base URL is the upstream's OpenAI base
    URL (``http://127.0.0.1:8080/v1/``), or None when no upstream is configured."""

    def __init__(self, settings: Settings, client: httpx.AsyncClient | None) -> None:
        self._settings = settings
        self._client = client
        self._timeout = settings.upstream_probe_timeout
        key = settings.upstream_api_key
        self._headers = {"authorization": f"Bearer {key}"} if key else {}
        self._root = wf.root_url(client.base_url) if client is not None else ""
        self._server: _Server | None = None
        self._detecting = asyncio.Lock()
        self._windows = _OncePerKey(self._probe_window)
        self._ratios = _OncePerKey(self._probe_ratio)
        self._counted = _OncePerKey(self._probe_counted)
        self._count_with: dict[str, Callable[[str], Awaitable[int | None]]] = {}
        self._warned: set[tuple[str, str]] = set()

    async def resolve(self, model: str | None, header: str | None) -> Window:
        """The window of ``model``; ``header`` is the request's X-Memd-Context-Window
        value. Raises InvalidInput if the header is not a positive integer."""
        if header is not None:
            return Window(_parse_header(header), "header", HEADER)
        if model:
            found = wf.match_pattern(self._settings.context_windows, model)
            if found is not None:
                return Window(found[1], "config", found[0])
            if self._client is not None:
                window = await self._windows.get(model)
                if window is not None:
                    return window
            found = builtin_window(model)
            if found is not None:
                return Window(found[1], "builtin", found[0])
        if self._settings.context_window is not None:
            return Window(self._settings.context_window, "default", "--context-window")
        return Window(None, "unknown")

    async def token_ratio(self, model: str | None) -> float | None:
        """How many tokens the model's own tokenizer makes of a text per cl100k token
        (1.12: 12% more), measured once per model through the upstream's tokenize
        endpoint (llama.cpp, vLLM); None when the upstream offers none."""
        if self._client is None or not model:
            return None
        return await self._ratios.get(model)

    async def counted_ratio(self, model: str | None,
                            count: Callable[[str], Awaitable[int | None]]) -> float | None:
        """:meth:`token_ratio` measured with ``count``, a model server's own count of
        the prompt tokens of one user message holding a text (Anthropic's
        ``count_tokens``), once per model; ``count`` gives None when the server has no
        such count, and raises httpx errors when asking failed (asked again later)."""
        if not model:
            return None
        self._count_with[model] = count
        return await self._counted.get(model)

    def learn(self, model: str | None, refusal: bytes) -> int | None:
        """Take the window a refusal of ``model``'s request as too long states, for the
        calls after it; the window, or None when the refusal names none."""
        tokens = stated_window(refusal)
        if model and tokens:
            self._windows.put(model, _Probed(Window(tokens, "upstream",
                                                    "the model server's refusal")))
        return tokens

    def forget(self) -> None:
        """Drop every cached answer and failure (tests, a config reload)."""
        self._windows.clear()
        self._ratios.clear()
        self._counted.clear()
        self._server = None
        self._detecting = asyncio.Lock()
        self._warned.clear()

    # -- probes ----------------------------------------------------------------------

    async def _probe_window(self, model: str) -> _Probed[Window]:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._ask_window(await self._detected(), model)
        except (httpx.HTTPError, TimeoutError) as exc:
            self._warn(f"the context window of model {model!r}", ("window", model), exc)
            return _Probed(None, final=False)

    async def _probe_ratio(self, model: str) -> _Probed[float]:
        try:
            async with asyncio.timeout(self._timeout):
                server = await self._detected()
                if server.kind == "llama.cpp":
                    body = await self._json("POST", f"{self._root}/tokenize",
                                            json={"content": CALIBRATION_TEXT})
                    tokens = body.get("tokens") if isinstance(body, dict) else None
                    count = len(tokens) if isinstance(tokens, list) else None
                elif server.kind == "vllm":
                    body = await self._json("POST", f"{self._root}/tokenize", json={
                        "model": model, "prompt": CALIBRATION_TEXT,
                        "add_special_tokens": False})
                    count = wf.positive(body.get("count")) if isinstance(body, dict) else None
                else:
                    return _Probed(None)
        except (httpx.HTTPError, TimeoutError) as exc:
            self._warn(f"a token count for model {model!r}", ("ratio", model), exc)
            return _Probed(None, final=False)
        if not count:
            return _Probed(None)
        return _Probed(count / counter_for("gpt-4").count(CALIBRATION_TEXT))

    async def _probe_counted(self, model: str) -> _Probed[float]:
        count = self._count_with.pop(model, None)  # the caller's, not kept past its use
        if count is None:
            return _Probed(None, final=False)
        try:
            async with asyncio.timeout(self._timeout):
                whole = await count(CALIBRATION_TEXT)
                # the message's own framing, counted alone, is not the text's
                least = await count(".") if whole else None
        except (httpx.HTTPError, TimeoutError) as exc:
            self._warn(f"a token count for model {model!r}", ("count", model), exc)
            return _Probed(None, final=False)
        if not whole or least is None or whole <= least:
            return _Probed(None)
        return _Probed((whole - least + 1) / counter_for("gpt-4").count(CALIBRATION_TEXT))

    async def _detected(self) -> _Server:
        """What the upstream is, found out by the first probe that needs it, within that
        probe's time; a failure leaves it to the next probe."""
        async with self._detecting:
            if self._server is None:
                self._server = await self._detect()
            return self._server

    async def _detect(self) -> _Server:
        listing = await self._json("GET", "models")
        models = wf.entries(listing)
        if any("max_model_len" in m for m in models):
            return _Server("vllm", models)
        if any(m.get("owned_by") == "llamacpp" for m in models):
            return _Server("llama.cpp", models)
        if any(wf.context_field(m) for m in models):
            return _Server("generic", models)
        props = await self._json("GET", f"{self._root}/props")
        if isinstance(props, dict) and "default_generation_settings" in props:
            return _Server("llama.cpp", models)
        if any(m.get("owned_by") == "me" for m in models):
            schema = await self._json("GET", f"{self._root}/openapi.json")
            info = schema.get("info") if isinstance(schema, dict) else None
            if isinstance(info, dict) and "llama.cpp Python" in str(info.get("title")):
                return _Server("llama-cpp-python", models)
        version = await self._json("GET", f"{self._root}/api/version")
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            return _Server("ollama", models, version["version"])
        if wf.entries(await self._json("GET", f"{self._root}/api/v0/models")):
            return _Server("lmstudio", models)
        return _Server("generic", models)

    async def _ask_window(self, server: _Server, model: str) -> _Probed[Window]:
        if server.kind == "llama.cpp":
            return await self._llama_cpp(server, model)
        if server.kind == "ollama":
            return await self._ollama(server, model)
        if server.kind == "llama-cpp-python":
            return await self._llama_cpp_python(model)
        if server.kind == "lmstudio":
            entry = wf.find(wf.entries(await self._json("GET", f"{self._root}/api/v0/models")),
                          model)
            loaded = wf.positive(entry.get("loaded_context_length"))
            if loaded:
                return _upstream(loaded, "LM Studio loaded_context_length")
            # not loaded yet: LM Studio loads it on the first request with its own
            # default context, which may be smaller, so this is asked again later
            most = wf.positive(entry.get("max_context_length"))
            return _upstream(most, "LM Studio max_context_length", final=False)
        entry = wf.find(server.models, model)
        if not entry:  # a model added since the listing was read (a vLLM LoRA adapter)
            server.models = wf.entries(await self._json("GET", "models"))
            entry = wf.find(server.models, model)
        if server.kind == "vllm":
            return _upstream(wf.positive(entry.get("max_model_len")), "vLLM max_model_len")
        name, tokens = wf.context_field(entry) or ("", None)
        return _upstream(tokens, f"/models {name}")

    async def _llama_cpp(self, server: _Server, model: str) -> _Probed[Window]:
        # /props reports the context of one slot, the most one request can use (the
        # server's -c is shared among its --parallel slots). A router serving several
        # models answers for the one named by ?model=; a single-model server ignores it.
        props = await self._json("GET", f"{self._root}/props", params={"model": model})
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            slot = wf.positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
            slots = wf.positive(props.get("total_slots")) or 1
            if slot:
                return _upstream(slot, f"llama.cpp /props n_ctx ({slots} slots)")
            total = wf.positive(props.get("n_ctx"))  # servers that report only the total
            if total:
                return _upstream(total // slots, f"llama.cpp /props n_ctx / {slots} slots")
        # /props said nothing about the context: the training length, the most the
        # model can run with, is the best left
        entry = wf.find(server.models, model) or (server.models[0] if server.models else {})
        meta = entry.get("meta")
        train = wf.positive(meta.get("n_ctx_train")) if isinstance(meta, dict) else None
        return _upstream(train, "llama.cpp /v1/models n_ctx_train")

    async def _llama_cpp_python(self, model: str) -> _Probed[Window]:
        """The window llama-cpp-python's refusal of a prompt of ``_PROBE_TOKENS`` states;
        None (the other sources decide) if it took the prompt, a context over 128k."""
        assert self._client is not None
        response = await self._client.post(
            "completions", headers=self._headers,
            json={"model": model, "prompt": " hi" * _PROBE_TOKENS, "max_tokens": 1})
        if response.status_code >= 500:
            response.raise_for_status()
        tokens = stated_window(response.content) if response.status_code >= 400 else None
        return _upstream(tokens, "llama-cpp-python's refusal of an over-long prompt")

    async def _ollama(self, server: _Server, model: str) -> _Probed[Window]:
        # "name" for servers older than the "model" field; newer ones prefer "model"
        show = await self._json("POST", f"{self._root}/api/show",
                                json={"model": model, "name": model})
        if not isinstance(show, dict):
            return _Probed(None)  # not a model this Ollama has
        info = show.get("model_info")
        train = wf.train_length(info) if isinstance(info, dict) else None
        ps = await self._json("GET", f"{self._root}/api/ps")
        wanted = wf.ollama_name(model)
        for running in wf.entries(ps, "models"):
            if wanted in (wf.ollama_name(str(running.get(k, ""))) for k in ("name", "model")):
                loaded = wf.positive(running.get("context_length"))
                if loaded:
                    return _upstream(loaded, "Ollama /api/ps context_length")
        params = show.get("parameters")
        num_ctx = wf.num_ctx(params) if isinstance(params, str) else None
        if num_ctx:
            return _upstream(min(num_ctx, train or num_ctx), "Ollama num_ctx parameter")
        old = wf.version(server.version) < _OLLAMA_DEFAULT_SINCE
        default = _OLLAMA_OLD_DEFAULT if old else _OLLAMA_DEFAULT
        return _upstream(min(default, train or default), "Ollama default num_ctx",
                         final=False)

    async def _json(self, method: str, url: str, **kwargs: Any) -> Any:
        """The JSON body of a successful answer, None when the server says the endpoint
        or model is not there (4xx) or answers something other than JSON. Server errors
        (5xx, such as llama.cpp's 503 while it loads the model) and transport errors
        raise httpx errors: the probe failed and is tried again later."""
        assert self._client is not None
        response = await self._client.request(method, url, headers=self._headers, **kwargs)
        if response.status_code >= 500:
            response.raise_for_status()
        if response.status_code >= 300:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _warn(self, question: str, key: tuple[str, str], exc: BaseException) -> None:
        """Log a failed probe: once at WARNING, again only at DEBUG."""
        # An HTTP status error's text holds the URL, which may hold credentials.
        reason = (f"no answer within {self._timeout:g} s" if isinstance(exc, TimeoutError)
                  else f"HTTP {exc.response.status_code}"
                  if isinstance(exc, httpx.HTTPStatusError)
                  else f"{type(exc).__name__}: {exc}")
        if key in self._warned:
            log.debug("asking the upstream about %s failed again (%s)", question, reason)
            return
        self._warned.add(key)
        log.warning("could not ask the upstream about %s (%s); using the other sources, "
                    "asking again in %d minutes at the earliest", question, reason,
                    RETRY_SECONDS // 60)




def stated_window(refusal: bytes) -> int | None:
    """The window in tokens that a model server's refusal of a too-long prompt states,
    or None."""
    found = _STATED_WINDOW.search(refusal[:4096])
    return wf.positive(int(next(g for g in found.groups() if g))) if found else None


@cache
def builtin_table() -> dict[str, int]:
    """The pattern → tokens table shipped in ``memd/data/context_windows.toml``."""
    text = resources.files("memd").joinpath("data", "context_windows.toml").read_text("utf-8")
    return {str(k): int(v) for k, v in tomllib.loads(text).items()}


@lru_cache(maxsize=1024)
def builtin_window(model: str) -> tuple[str, int] | None:
    return wf.match_pattern(builtin_table(), model)




def _parse_header(value: str) -> int:
    text = value.strip()
    if not text.isascii() or not text.isdigit() or not 0 < int(text) <= _MAX_HEADER_TOKENS:
        raise InvalidInput(f"{HEADER} must be a positive whole number of tokens (at most "
                           f"{_MAX_HEADER_TOKENS}), not {value!r}")
    return int(text)




def _upstream(tokens: int | None, detail: str, final: bool = True) -> _Probed[Window]:
    return _Probed(Window(tokens, "upstream", detail) if tokens else None, final)
