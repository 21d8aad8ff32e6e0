"""The Anthropic Messages format seen as memd's conversation model, and back.

A Messages request keeps its system prompt beside the messages and puts everything in
content blocks: the model's tool calls are ``tool_use`` blocks of an assistant message,
their results ``tool_result`` blocks of the next user message, the model's reasoning
``thinking`` blocks with a signature. memd's engine works on one conversation model, the
Chat Completions message list with content parts, so that session identity, chain
hashing, storage, extraction and recall serve every door alike. :func:`view` converts a
request into that model; blocks are kept as they are, as content parts, so that nothing
is lost:

- ``system`` becomes a leading system message (what identifies the conversation);
- an assistant message keeps its blocks as content, and its ``tool_use`` blocks are also
  its ``tool_calls`` (arguments as compact JSON), which chain hashing canonicalizes;
- each ``tool_result`` block of a user message becomes a ``tool`` message, and what else
  the user message holds (the user's text, images, a client's reminders) a user message
  of its own: after a tool call the newest user message holds only results, which are not
  the user's words, so the memory block stays in the user's typed turn, byte for byte,
  through the whole tool loop, as on the Chat Completions door; what else the block
  holds (``is_error``, ``cache_control``) is kept as the tool message's ``block``.

:func:`unview` is the way back, which shows that the view loses nothing: it gives the
request's ``system`` and ``messages`` as the client sent them.

What goes upstream is the client's request, never the view converted back:
:func:`forward` takes the client's messages and only inserts the memory block the engine
placed, in the message it came from, after that message's ``tool_result`` blocks (which
the API requires first), and, when context virtualization holds a long history within
the window, replaces the content of the ``tool_result`` blocks it degraded and takes out
the ``tool_use`` / ``tool_result`` pairs it evicted. ``system`` and ``tools`` are never
touched: they come first in the provider's cached prefix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.engine.formats.sse import EventReply
from memd.engine.validate import clean_chars, is_count, sanitized


@dataclass(frozen=True, slots=True)
class View:
    """A request in the conversation model: ``messages``, and for each the index of the
    client's message it came from (-1: the system prompt)."""

    messages: list[dict[str, Any]]
    origin: list[int]


def _blocks(content: Any) -> list[Mapping[str, Any]] | None:
    if isinstance(content, list) and all(isinstance(b, Mapping) for b in content):
        return content
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _result(content: Any) -> Any:
    """A tool result's content as a message's: text, blocks, or other JSON as text."""
    if content is None or isinstance(content, str) or _blocks(content) is not None:
        return content
    return json.dumps(content, ensure_ascii=False)


def _tool_calls(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": b.get("id"), "type": "function",
             "function": {"name": b.get("name"),
                          "arguments": json.dumps(b.get("input") or {}, sort_keys=True,
                                                  separators=(",", ":"),
                                                  ensure_ascii=False)}}
            for b in blocks if b.get("type") == "tool_use"]


def assistant(content: Any) -> dict[str, Any]:
    """An assistant message of the Messages format (a reply, or one resent) in the
    conversation model."""
    blocks = _blocks(content)
    if blocks is None:
        return {"role": "assistant", "content": content}
    message: dict[str, Any] = {"role": "assistant", "content": list(blocks)}
    calls = _tool_calls(blocks)
    if calls:
        message["tool_calls"] = calls
    return message


def view(body: Mapping[str, Any]) -> View:
    """The request ``body`` in the conversation model (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    origin: list[int] = []
    system = body.get("system")
    if isinstance(system, str | list) and system:
        messages.append({"role": "system", "content": system})
        origin.append(-1)
    raw = body.get("messages")
    for i, m in enumerate(raw if isinstance(raw, list) else ()):
        if not isinstance(m, Mapping):
            messages.append(m)  # the engine says what is wrong with it
            origin.append(i)
            continue
        role, content = m.get("role"), m.get("content")
        blocks = _blocks(content)
        if role == "assistant":
            messages.append(assistant(content))
            origin.append(i)
        elif role == "user" and blocks is not None and any(
                b.get("type") == "tool_result" for b in blocks):
            for b in blocks:
                if b.get("type") == "tool_result":
                    messages.append({
                        "role": "tool", "tool_call_id": _text(b.get("tool_use_id")),
                        "content": _result(b.get("content")),
                        "block": {k: x for k, x in b.items() if k not in _RESULT_KEYS}})
                    origin.append(i)
            rest = [b for b in blocks if b.get("type") != "tool_result"]
            if rest:
                messages.append({"role": "user", "content": rest})
                origin.append(i)
        else:
            messages.append({"role": role, "content": content})
            origin.append(i)
    return View(messages, origin)


_RESULT_KEYS = ("tool_use_id", "content")


def _tool_result(message: Mapping[str, Any]) -> dict[str, Any]:
    """A tool message of the view as the ``tool_result`` block it came from."""
    block = dict(message.get("block") or {"type": "tool_result"})
    block["tool_use_id"] = message.get("tool_call_id")
    if message.get("content") is not None:
        block["content"] = message["content"]
    return block


def unview(seen: View) -> dict[str, Any]:
    """The request fields ``seen`` was made of (``system`` when there was one, and
    ``messages``), rebuilt from the view alone: ``unview(view(body))`` equals them."""
    out: dict[str, Any] = {}
    messages: list[Any] = []
    last = -1
    for message, at in zip(seen.messages, seen.origin, strict=True):
        if at < 0:
            out["system"] = message["content"]
        elif not isinstance(message, Mapping):
            messages.append(message)
        elif message.get("role") == "tool" or (at == last and message.get("role") == "user"):
            part = [_tool_result(message)] if message.get("role") == "tool" \
                else list(message["content"])
            if at == last:  # the results and the rest of one user message
                messages[-1]["content"].extend(part)
            else:
                messages.append({"role": "user", "content": part})
        else:
            messages.append({"role": message.get("role"), "content": message.get("content")})
        last = at
    out["messages"] = messages
    return out


def forward(body: Mapping[str, Any], seen: View,
            placed: Sequence[Mapping[str, Any] | None]) -> list[Any] | None:
    """The client's messages with what the engine changed in ``placed`` (the view's
    messages, None where one was left out) put back, or None when a change is not one
    this door can put back (the request then goes as sent).

    Two kinds of change. The memory block, inside one user message: it goes after that
    message's ``tool_result`` blocks (which the API requires first). And context
    virtualization's (:mod:`memd.engine.virtual`): a degraded tool result is its
    ``tool_result`` block with the new content (``tool_use_id``, ``is_error`` and
    ``cache_control`` stay); an evicted one leaves with its ``tool_use`` block; a message
    left with nothing to say goes, and what was on either side of it, if of one role,
    becomes one message (the API merges consecutive turns of a role alike)."""
    original = list(body.get("messages") or ())
    if len(placed) != len(seen.messages):
        return None
    parts: dict[int, list[tuple[Mapping[str, Any] | None, Mapping[str, Any]]]] = {}
    for mine, theirs, at in zip(placed, seen.messages, seen.origin, strict=True):
        if mine is theirs:
            parts.setdefault(at, []).append((mine, theirs))
            continue
        if at < 0 or theirs.get("role") not in ("user", "tool", "assistant") \
                or (mine is None and theirs.get("role") == "user"):
            return None
        parts.setdefault(at, []).append((mine, theirs))
    out: list[Any] = []
    dropped = False
    for at, message in enumerate(original):
        pairs = parts.get(at, [])
        if all(mine is theirs for mine, theirs in pairs):
            new: Any = message
        elif message.get("role") == "assistant":
            new = _assistant_kept(message, pairs[0][0])
        else:
            new = _user_kept(message, pairs)
            if new is _CANNOT:
                return None
        if new is None:
            dropped = True
        elif dropped and out and isinstance(out[-1], Mapping) \
                and out[-1].get("role") == new.get("role"):
            out[-1] = {**out[-1], "content": [*_as_blocks(out[-1].get("content")),
                                              *_as_blocks(new.get("content"))]}
            dropped = False
        else:
            out.append(new)
            dropped = False
    return out


_CANNOT: Any = object()  # a change :func:`forward` cannot put back
_SILENT = ("thinking", "redacted_thinking")  # blocks that say nothing on their own


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def _assistant_kept(message: Mapping[str, Any],
                    mine: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An assistant message without the ``tool_use`` blocks whose calls the engine
    evicted; None when nothing but its reasoning would be left."""
    calls = {c.get("id") for c in (mine or {}).get("tool_calls") or ()
             if isinstance(c, Mapping)}
    blocks = [b for b in _as_blocks(message.get("content"))
              if not (isinstance(b, Mapping) and b.get("type") == "tool_use"
                      and b.get("id") not in calls)]
    if all(isinstance(b, Mapping) and b.get("type") in _SILENT for b in blocks):
        return None
    return {**message, "content": blocks}


def _user_kept(message: Mapping[str, Any],
               pairs: Sequence[tuple[Mapping[str, Any] | None, Mapping[str, Any]]]) -> Any:
    """A user message with its tool results as the engine left them and the memory
    block the engine placed in its own part; None when nothing is left of it."""
    content = message.get("content")
    results = iter([(mine, theirs) for mine, theirs in pairs if theirs.get("role") == "tool"])
    own = [(mine, theirs) for mine, theirs in pairs if theirs.get("role") == "user"]
    added = own[0][0] if own and own[0][0] is not own[0][1] else None
    if not isinstance(content, list):
        if added is None or not isinstance(content, str):
            return _CANNOT if added is not None else message
        got = added.get("content")
        return {**message, "content": _beside(content, got)} if isinstance(got, str) \
            else _CANNOT
    blocks: list[Any] = []
    for b in content:
        if isinstance(b, Mapping) and b.get("type") == "tool_result":
            mine, theirs = next(results, (None, None))
            if mine is not None:
                blocks.append(b if mine is theirs else {**b, "content": mine.get("content")})
        else:
            blocks.append(b)
    if added is not None:
        extra = added.get("content")
        if not isinstance(extra, list) or not extra:
            return _CANNOT
        first = next((k for k, b in enumerate(blocks)
                      if not (isinstance(b, Mapping) and b.get("type") == "tool_result")),
                     len(blocks))
        blocks.insert(first, extra[0])
    return {**message, "content": blocks} if blocks else None


def _beside(content: str, added: str) -> list[dict[str, Any]] | str:
    """A string message with the block the engine put before its text, as two text
    blocks: the block, then the client's text. The API reads a string as one text block,
    and Claude Code sends a turn as blocks while it is the newest and as a string once it
    is not: with the block always a block of its own, the turn renders the same both
    times and the provider's prompt cache goes on past it."""
    if not added.endswith(content) or len(added) == len(content):
        return added
    block = {"type": "text", "text": added[:len(added) - len(content)]}
    return [block, {"type": "text", "text": content}] if content else [block]


def side_body(body: Mapping[str, Any], seen: View) -> dict[str, Any]:
    """What :func:`memd.engine.conversation.side.side_reason` reads of a Messages request: its
    messages in the conversation model, its tools and answer limit, and a JSON-schema
    ``output_config.format`` (a client asking for data, such as a title) as the response
    format."""
    out: dict[str, Any] = {"messages": seen.messages, "tools": body.get("tools"),
                           "max_tokens": body.get("max_tokens")}
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        out["response_format"] = {"type": "json_schema"}
    return out


def usage(value: Any) -> dict[str, Any] | None:
    """A Messages usage object with memd's own counts added: the prompt is every input
    token, cached or not."""
    if not isinstance(value, Mapping):
        return None
    counts = {k: n for k, n in value.items() if is_count(n)}
    prompt = sum(counts.get(k, 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                            "cache_read_input_tokens"))
    return {**counts, "prompt_tokens": prompt,
            "completion_tokens": counts.get("output_tokens", 0)}


def whole(data: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None,
                                             dict[str, Any] | None]:
    """A whole Messages answer's (reply, stop reason, usage)."""
    content, stop = data.get("content"), data.get("stop_reason")
    return (dict(sanitized(assistant(content))) if isinstance(content, list) else None,
            clean_chars(stop) if isinstance(stop, str) else None, usage(data.get("usage")))


class StreamReply(EventReply):
    """Rebuilds the reply from a Messages event stream as it passes through: its content
    blocks (text, tool_use with its input from the JSON deltas, thinking with its
    signature), stop reason, usage and model."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        index = event.get("index")
        if kind == "message_start" and isinstance(event.get("message"), Mapping):
            message = event["message"]
            self.model = message.get("model") if isinstance(message.get("model"), str) \
                else self.model
            if isinstance(message.get("usage"), Mapping):
                self._usage.update(message["usage"])
        elif kind == "content_block_start" and isinstance(index, int) \
                and isinstance(event.get("content_block"), Mapping):
            self.blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta" and index in self.blocks \
                and isinstance(event.get("delta"), Mapping):
            self._delta(self.blocks[index], index, event["delta"])
        elif kind == "content_block_stop" and index in self._json:
            text = "".join(self._json.pop(index))
            try:
                self.blocks[index]["input"] = json.loads(text) if text.strip() else {}
            except json.JSONDecodeError:
                self.blocks[index]["input"] = text
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self.finish_reason = delta["stop_reason"]
            if isinstance(event.get("usage"), Mapping):
                self._usage.update(event["usage"])
        elif kind == "message_stop":
            self.done = True

    def _delta(self, block: dict[str, Any], index: int, delta: Mapping[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(
                delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(
                delta.get("signature") or "")

    @property
    def usage(self) -> dict[str, Any] | None:
        return usage(self._usage) if self._usage else None

    def reply(self) -> dict[str, Any]:
        """The assistant message so far, in the conversation model."""
        return dict(sanitized(assistant([self.blocks[i] for i in sorted(self.blocks)])))
