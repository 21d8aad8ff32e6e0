"""Chain hashes: how a resent history is recognized (see :mod:`memd.engine.chat`).

Every stored message carries the SHA-256 over its session's non-system messages up to
and including it (canonical role, content, name, tool calls and tool_call_id); a
client's incoming history is hashed the same way and looked up.

The canonical form leaves out what clients rewrite when they resend a message they
received, so that a conversation is not split at every step: a tool call's arguments are
compared as parsed JSON (a model server may return ``{"filePath": "x"}`` and the client
resend ``{"filePath":"x"}``, or reorder the keys), content given as text parts is joined,
and line endings and whitespace at the ends of lines do not count. A message with
nothing to rewrite (plain text, arguments already compact with sorted keys) keeps the
canonical form, and so the hash, it had before these rules.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_ROLES = ("system", "developer")


def canonical(message: Mapping[str, Any]) -> str:
    """The message as its chain hash sees it (see the module's docstring)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content
                            if isinstance(p, Mapping) and p.get("type") == "text")
    calls = [
        [c.get("id"), (c.get("function") or {}).get("name"),
         canonical_arguments((c.get("function") or {}).get("arguments"))]
        for c in message.get("tool_calls") or () if isinstance(c, Mapping)
    ]
    return json.dumps([message.get("role"), canonical_text(content), message.get("name"),
                       calls, message.get("tool_call_id")], ensure_ascii=False)


def canonical_text(content: Any) -> str:
    """Text content without what a resend may change: surrounding whitespace, CR line
    endings, whitespace at the end of a line."""
    text = content.strip() if isinstance(content, str) else ""
    if "\r" in text or " \n" in text or "\t\n" in text:
        text = "\n".join(line.rstrip() for line in
                         text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return text


def canonical_arguments(arguments: Any) -> Any:
    """A tool call's arguments as compact JSON with sorted keys; arguments that are not
    JSON stay as sent (they can only match themselves), and empty ones are ``{}``."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return "{}"
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    elif arguments is None:
        return "{}"
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain_hashes(messages: Sequence[Mapping[str, Any]], previous: str | None) -> list[str | None]:
    """The chain hash of each message (None for system messages, which are skipped)."""
    out: list[str | None] = []
    head = previous or ""
    for m in messages:
        if m.get("role") in SYSTEM_ROLES:
            out.append(None)
            continue
        head = hashlib.sha256((head + "\x1e" + canonical(m)).encode("utf-8")).hexdigest()
        out.append(head)
    return out


_Request = tuple[str, Sequence[Mapping[str, Any]], list[str | None]]  # user, messages, hashes


class ChainCache:
    """The chain hashes of the last requests, per user: an agent resends the previous
    request's messages plus a few on every step, so the hashes of the messages equal to
    the previous request's (compared as parsed: far cheaper than canonical JSON and
    SHA-256 over a 100k-token history) are taken from it, and only the new ones are
    hashed. Bounded: the newest ``max_requests`` requests of all users."""

    def __init__(self, max_requests: int = 16) -> None:
        self.max_requests = max_requests
        self._lock = threading.Lock()
        self._last: OrderedDict[int, _Request] = OrderedDict()
        self._serial = 0

    def hashes(self, user_id: str, messages: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """``chain_hashes(messages, None)``, reusing the longest equal prefix of one of the
        user's last requests."""
        with self._lock:
            mine = [(key, m, h) for key, (u, m, h) in self._last.items() if u == user_id]
        best, reused, key = 0, [], None
        for k, old, old_hashes in mine:
            n = _common_prefix(old, messages)
            if n > best:
                best, reused, key = n, old_hashes[:n], k
        previous = next((h for h in reversed(reused) if h is not None), None)
        out = reused + chain_hashes(messages[best:], previous)
        with self._lock:
            if key is not None:
                self._last.pop(key, None)
            self._serial += 1
            self._last[self._serial] = (user_id, messages, out)
            while len(self._last) > self.max_requests:
                self._last.popitem(last=False)
        return out


def _common_prefix(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
