"""Chain hashes: how a resent history is recognized (see :mod:`memd.engine.conversation.chat`).

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
from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_ROLES = ("system", "developer")


def content_text(content: Any) -> str:
    """A message's text: a string as it is, the text parts of a list of content parts
    joined by newlines, else nothing."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(content_texts(content))
    return ""


def content_texts(parts: Sequence[Any]) -> list[str]:
    """The texts of the text parts among content ``parts``, in order."""
    return [str(p.get("text", "")) for p in parts
            if isinstance(p, Mapping) and p.get("type") == "text"]


def canonical(message: Mapping[str, Any]) -> str:
    """The message as its chain hash sees it (see the module's docstring)."""
    content = content_text(message.get("content"))
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
