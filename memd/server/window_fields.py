"""Reading the fields in which model servers state a model's context window (their
/models listings, llama.cpp's /props, Ollama's /api/show and /api/ps, LM Studio's
/api/v0/models), and the names a model goes by: for :mod:`memd.server.windows`."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

import httpx


def model_names(model: str) -> tuple[str, ...]:
    name = model.lower()
    bare = name.rsplit("/", 1)[-1]  # "openai/gpt-4o", "hf.co/org/repo:q4" → the last part
    return (name,) if bare == name else (name, bare)


def root_url(base: httpx.URL) -> str:
    path = base.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return str(base.copy_with(path=path or "/")).rstrip("/")


def positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def entries(body: Any, key: str = "data") -> list[dict[str, Any]]:
    items = body.get(key) if isinstance(body, dict) else None
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def find(models: list[dict[str, Any]], model: str) -> dict[str, Any]:
    for m in models:
        if m.get("id") == model:
            return m
    lowered = model.lower()
    return next((m for m in models if str(m.get("id", "")).lower() == lowered), {})


def context_field(entry: Mapping[str, Any]) -> tuple[str, int] | None:
    for name in ("context_length", "context_window", "max_context_length"):
        tokens = positive(entry.get(name))
        if tokens:
            return name, tokens
    return None


def train_length(info: Mapping[str, Any]) -> int | None:
    arch = info.get("general.architecture")
    found = positive(info.get(f"{arch}.context_length"))
    if found is None:  # an architecture name that does not prefix its keys
        found = next((positive(v) for k, v in info.items()
                      if k.endswith(".context_length") and positive(v)), None)
    return found


def num_ctx(parameters: str) -> int | None:
    """num_ctx from Ollama's parameters block: one "name value" line per parameter."""
    for line in parameters.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "num_ctx" and parts[1].isdigit():
            return int(parts[1]) or None
    return None


def ollama_name(name: str) -> str:
    name = name.lower()
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def version(text: str) -> tuple[int, ...]:
    """(0, 6, 7) of "0.6.7-rc1"; a development build's "0.0.0" counts as new."""
    parts = []
    for piece in text.split("-", 1)[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return (999,) if not any(parts) else tuple(parts)


def match_pattern(table: Mapping[str, int], model: str) -> tuple[str, int] | None:
    """The (pattern, tokens) of ``table`` that matches ``model`` most specifically: an
    exact name before any glob, then the longest glob. Patterns are matched without
    regard to case, against the name and the name without its provider prefix."""
    names = model_names(model)
    best: tuple[tuple[bool, int, str], str, int] | None = None
    for pattern, tokens in table.items():
        lowered = pattern.lower()
        if any(fnmatchcase(name, lowered) for name in names):
            rank = (not any(c in lowered for c in "*?["), len(lowered), lowered)
            if best is None or rank > best[0]:
                best = (rank, pattern, tokens)
    return None if best is None else (best[1], best[2])
