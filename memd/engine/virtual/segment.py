"""Segmentation: a Chat Completions history cut into context objects.

Each tool result (a ``tool`` message) becomes one object, of the tool call that asked for
it: ``source_tool`` is that call's function name and ``source_key`` what it was of (a
read's path, a run's command, a search's pattern), from the call's arguments. Its type is
``file_context`` for a read, ``error_context`` for output that reports an error, else
``tool_result`` (the other types of the design, conversation phases, plans, decisions,
are the helper model's to find). An object's id derives from the session, the tool call
id and the content's hash, so the same message resent on the next call is the same
object, and memd finds what it decided about it before.

Only tool results are objects: the system prompt, the user's messages (their
instructions and corrections) and the assistant's messages are never degraded.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OBJECT_TYPES = ("tool_result", "file_context", "conversation_phase", "error_context", "plan",
                "design_decision", "debugging_session", "external_reference")
# argument names that say what a tool call is of, the most telling first
KEY_ARGUMENTS = ("path", "file_path", "filePath", "filename", "file", "absolute_path",
                 "command", "cmd", "pattern", "query", "url")
_READ_WORDS = ("read", "view", "cat", "open_file", "get_file")
ERROR_MARKS = ("Traceback (most recent call last)", "error:", "Error:", "ERROR",
                "FAILED", "panic:", "exit code 1", "exit status 1")


@dataclass(frozen=True, slots=True)
class Segment:
    """One tool result of the history: where it is, what it is of, and its text."""

    index: int  # its position in the messages
    object_id: str
    content_hash: str
    object_type: str
    source_tool: str | None
    source_key: str | None
    tool_call_id: str | None
    turn: int  # the user turn it came in, counted from 1 (0: before any)
    text: str


def segment(session_id: str, messages: Sequence[Mapping[str, Any]],
            calls: Mapping[str, tuple[int, Mapping[str, Any]]] | None = None,
            ) -> list[Segment]:
    """The tool results of ``messages`` with text content, oldest first (``calls``: their
    :func:`tool_calls`, when the caller has them already)."""
    calls = tool_calls(messages) if calls is None else calls
    out: list[Segment] = []
    turn = 0
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "user":
            turn += 1
        elif role == "tool":
            text = text_of(m.get("content"))
            if text is None:
                continue
            call_id = m.get("tool_call_id")
            call_id = call_id if isinstance(call_id, str) else None
            call = calls[call_id][1] if call_id is not None and call_id in calls else {}
            fn = call.get("function")
            fn = fn if isinstance(fn, Mapping) else {}
            tool = fn.get("name") if isinstance(fn.get("name"), str) else None
            arguments = fn.get("arguments")
            digest, object_type = _read(tool, text)
            oid = hashlib.sha256(
                f"{session_id}\0{call_id or ''}\0{digest}".encode()).hexdigest()[:16]
            out.append(Segment(i, "ctx-" + oid, digest, object_type, tool,
                               source_key(arguments), call_id, turn, text))
    return out


@functools.lru_cache(maxsize=256)
def _read(tool: str | None, text: str) -> tuple[str, str]:
    """A tool result's content hash and object type; kept, since every call of a session
    resends every earlier tool result, and hashing and scanning them all again (a long
    session's are ~300 KB) would cost each call more as the session grows. A resent
    result is usually the very string read before (the resend cache keeps the earlier
    request's messages), whose lookup then compares nothing; the bound holds a few long
    sessions' results."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), kind(tool, text)


def tool_calls(messages: Sequence[Mapping[str, Any]],
               ) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """Each tool call id of the assistant messages: its message's index, and the call."""
    out: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                    out[call["id"]] = (i, call)
    return out


def text_of(content: Any) -> str | None:
    """A tool message's text: its string, or its text parts joined (None: it holds
    something else, an image, which stays as it is)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "\n".join(p["text"] for p in content)
    return None


def source_key(arguments: Any) -> str | None:
    """What a tool call is of, from its arguments (a JSON string or an object)."""
    if isinstance(arguments, str):
        return _source_key_of_text(arguments)
    return _source_key_of(arguments)


@functools.lru_cache(maxsize=4096)
def _source_key_of_text(arguments: str) -> str | None:
    """:func:`source_key` of arguments as JSON text; kept, since every call of a session
    resends every earlier tool call and parsing them all again would cost each call more
    as the session grows."""
    try:
        return _source_key_of(json.loads(arguments))
    except ValueError:
        return None


def _source_key_of(arguments: Any) -> str | None:
    if not isinstance(arguments, Mapping):
        return None
    for name in KEY_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str) and value.strip():
            return value.strip()[:500]
    return None


def kind(tool: str | None, text: str) -> str:
    """The object type of a tool's output."""
    name = (tool or "").lower()
    if any(word in name for word in _READ_WORDS):
        return "file_context"
    if any(mark in text for mark in ERROR_MARKS):
        return "error_context"
    return "tool_result"
