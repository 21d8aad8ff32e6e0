"""A provider's prompt cache, simply: what an Anthropic-format request would read from
and write to it, from its bytes and its ``cache_control`` breakpoints.

The cache holds byte-exact prefixes of the prompt in the order tools -> system ->
messages. A request writes the prefix ending at each of its breakpoints (a block that
carries ``cache_control``); the next request reads the longest of those prefixes that it
starts with, at one of its block boundaries up to its last breakpoint, and writes what
lies between that and its last breakpoint. The breakpoint markers are not part of the
prefix: a client moves them forward every turn, and that keeps the cache. Nor are the
JSON's key order and spelling: a provider caches the prompt it renders, so a string
content is the one text block it stands for. Sizes are in bytes of that rendering (each
block as JSON with sorted keys), a stand-in for tokens.

Used by ``bench.bench_doors`` and by the tests that replay recorded Claude Code traffic.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def _canon(value: Any) -> bytes:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "cache_control"}
    return json.dumps(value, ensure_ascii=False, sort_keys=True).encode()


def prompt_blocks(body: dict[str, Any]) -> list[tuple[bytes, bool]]:
    """The request's prompt in cache order, block by block: each tool, each system block,
    each message's role then each of its content blocks (a string is one text block);
    with whether the block carries a breakpoint."""
    out: list[tuple[bytes, bool]] = []

    def add(value: Any) -> None:
        marked = isinstance(value, dict) and "cache_control" in value
        out.append((_canon(value), marked))

    def blocks(content: Any) -> list[Any]:  # a string is one text block, as the API reads it
        if isinstance(content, list):
            return content
        return [{"type": "text", "text": content}] if isinstance(content, str) else []

    for tool in body.get("tools") or ():
        add(tool)
    for block in blocks(body.get("system")):
        add(block)
    for message in body.get("messages") or ():
        out.append((f'<{message.get("role")}>'.encode(), False))
        for block in blocks(message.get("content")):
            add(block)
    return out


def prompt_bytes(body: dict[str, Any]) -> bytes:
    """The request's prompt as one byte string (the blocks of :func:`prompt_blocks`)."""
    return b"".join(b for b, _ in prompt_blocks(body))


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    limit = min(len(a), len(b))
    low, high = 0, limit  # a[:low] == b[:low] holds; bisect on the first difference
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass
class PromptCache:
    """The cache between consecutive requests of one conversation (see the module
    docstring): :meth:`usage` gives a request's cache figures and remembers what it
    wrote, for the next one; ``shared`` holds, per request, how many bytes of its prompt
    are the previous request's prompt from the start (byte for byte, breakpoint markers
    aside), and its size."""

    written: set[bytes] = field(default_factory=set)  # digests of the cached prefixes
    previous: bytes = b""
    shared: list[tuple[int, int]] = field(default_factory=list)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """The request's ``input_tokens``, ``cache_read_input_tokens`` and
        ``cache_creation_input_tokens`` (bytes)."""
        digest = hashlib.sha256()
        size = last_mark = read = 0
        marks: set[bytes] = set()
        for block, marked in prompt_blocks(body):
            digest.update(block)
            size += len(block)
            key = digest.digest()
            if key in self.written:
                read = size
            if marked:
                marks.add(key)
                last_mark = size
        read = min(read, last_mark)
        whole = prompt_bytes(body)
        self.shared.append((common_prefix(self.previous, whole), len(whole)))
        self.written, self.previous = marks, whole
        return {"input_tokens": size - max(read, last_mark),
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": max(0, last_mark - read)}

    def automatic(self, prompt: bytes) -> int:
        """What an automatic prefix cache (OpenAI's: no breakpoints) reads of ``prompt``:
        the bytes it shares with the previous prompt from the start."""
        self.shared.append((common_prefix(self.previous, prompt), len(prompt)))
        self.previous = prompt
        return self.shared[-1][0]


def responses_prompt_bytes(body: dict[str, Any]) -> bytes:
    """A Responses request's prompt as OpenAI's automatic prefix cache sees it (no
    breakpoints): the instructions, the tools, then each input item."""
    items = body.get("input")
    return b"".join([_canon(body.get("instructions")), _canon(body.get("tools")),
                     *(_canon(i) for i in (items if isinstance(items, list) else [items]))])
