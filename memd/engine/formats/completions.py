"""The Chat Completions format's answers, as memd stores them: a streamed answer
rebuilt from its SSE chunks as they pass through (:class:`StreamReply`), a whole one read
from its JSON (:func:`whole`). The client already has the answer as the model server
sent it, so what memd cannot store is cleaned or dropped, never refused. The other doors'
readers are beside it (:mod:`memd.engine.formats.anthropic`, :mod:`memd.engine.formats.responses`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.engine import validate
from memd.engine.formats.sse import DataEvents, json_event


class StreamReply(DataEvents):
    """Rebuilds the assistant message from SSE chunks as they pass through."""

    def __init__(self) -> None:
        super().__init__()
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.done = False

    def _data(self, payload: bytes) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        chunk = json_event(payload)
        if chunk is None:
            return
        self.model = text_or_none(chunk.get("model")) or self.model
        if chunk.get("usage"):
            self.usage = usage_of(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for tc in delta.get("tool_calls") or ():
                slot = self.tool_calls.setdefault(
                    int(tc.get("index", 0)),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish_reason = text_or_none(choice["finish_reason"])

    def reply(self) -> dict[str, Any]:
        calls = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return stored_reply("".join(self.content) or None, calls or None)


def text_or_none(value: Any) -> str | None:
    return validate.clean_chars(value) if isinstance(value, str) else None


def stored_reply(content: Any, tool_calls: Any) -> dict[str, Any]:
    """What memd stores of a model's reply: the client already has it as sent, so a
    field memd cannot store is cleaned (a NUL or lone surrogate becomes U+FFFD) or
    dropped, never refused."""
    if not isinstance(content, str | list):
        content = None
    if not isinstance(tool_calls, list):
        tool_calls = None
    reply = validate.sanitized({"role": "assistant", "content": content,
                                "tool_calls": tool_calls})
    if isinstance(reply["content"], list) and not all(isinstance(p, Mapping)
                                                      for p in reply["content"]):
        reply["content"] = None
    if reply["tool_calls"] is not None:
        reply["tool_calls"] = [c for c in reply["tool_calls"] if isinstance(c, Mapping)]
    return dict(reply)


def usage_of(value: Any) -> dict[str, Any] | None:
    """A reply's usage as memd can store and count it: token counts that are not
    non-negative integers are dropped."""
    if not isinstance(value, Mapping):
        return None
    usage = validate.sanitized(dict(value))
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        n = usage.get(key)
        if n is not None and not validate.is_count(n):
            del usage[key]
    return dict(usage)


def whole(data: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None,
                                             dict[str, Any] | None]:
    """A whole Chat Completions answer's (reply, finish reason, usage)."""
    usage = usage_of(data.get("usage"))
    choices = data.get("choices") or []
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None, None, usage
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        message = {}
    return (stored_reply(message.get("content"), message.get("tool_calls")),
            text_or_none(choices[0].get("finish_reason")), usage)
