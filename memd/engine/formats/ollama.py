"""Ollama's native chat format seen as memd's conversation model, and back.

An Ollama ``/api/chat`` request is close to Chat Completions: a list of messages, each
with a role and a string ``content``. What differs is kept beside it: a user message's
``images`` (base64 strings), the model's ``thinking``, a tool result's ``tool_name``, and
tool calls whose ``arguments`` are JSON objects where the OpenAI format has JSON
strings. :func:`view` gives each client message one message of the conversation model
(the Chat Completions message list the engine works on, so that one memory serves every
door):

- ``role`` and ``content`` as they are (no content is an empty one: Ollama's default);
- tool calls as ``tool_calls`` of the OpenAI shape, their arguments as compact JSON with
  sorted keys, which chain hashing reads as it reads an OpenAI client's: the same call
  sent through either door is the same message of the same session;
- a tool result's ``tool_name`` as the tool message's ``name``; Ollama names no call's
  id, so a call without one gets an id made of the call itself, and the tool messages
  after an assistant message answer its calls in order;
- every field but ``role`` also as sent, under ``ollama``, so that :func:`unview`, the
  way back, gives the messages the client sent.

What goes upstream is the client's request, never the view converted back:
:func:`forward` only puts the memory block before the text of the user message the
engine placed it in.

An answer arrives as one JSON object, or streamed as newline-delimited JSON objects
(NDJSON), each with a piece of the message, the last with ``"done": true``, the reason
and the timing fields; :class:`StreamReply` rebuilds the reply from them as they pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from memd.engine.validate import clean_chars, is_count, sanitized

_TIMINGS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
            "eval_count", "eval_duration")


def _arguments(value: Any) -> str:
    """A tool call's arguments as the OpenAI format carries them: compact JSON."""
    return json.dumps({} if value is None else value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def _call_id(k: int, name: Any, arguments: str) -> str:
    """The id of a tool call that came without one (Ollama gives none): made of the call
    itself, so that the call stored from the answer and the call the client resends
    have the same one."""
    seed = json.dumps([k, name, arguments], ensure_ascii=False).encode("utf-8")
    return "call_" + hashlib.sha256(seed).hexdigest()[:24]


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        name, arguments = function.get("name"), _arguments(function.get("arguments"))
        ident = call.get("id") if isinstance(call.get("id"), str) and call["id"] \
            else _call_id(k, name, arguments)
        out.append({"id": ident, "type": "function",
                    "function": {"name": name, "arguments": arguments}})
    return out


def message(raw: Any, result_of: str | None = None) -> Any:
    """One Ollama message in the conversation model (see the module docstring);
    ``result_of`` is the id of the tool call a tool message answers."""
    if not isinstance(raw, Mapping):
        return raw  # the engine says what is wrong with it
    out: dict[str, Any] = {"role": raw.get("role"), "content": raw.get("content", "")}
    calls = _tool_calls(raw.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    if raw.get("role") == "tool":
        ident = raw.get("tool_call_id")
        out["tool_call_id"] = ident if isinstance(ident, str) and ident else \
            result_of or "call_unmatched"
        if isinstance(raw.get("tool_name"), str):
            out["name"] = raw["tool_name"]
    rest = {k: v for k, v in raw.items() if k != "role"}
    if rest:
        out["ollama"] = rest
    return out


def view(body: Mapping[str, Any]) -> list[Any]:
    """The request's messages in the conversation model, one for each of the client's.
    Ollama's tool results name no call: the tool messages after an assistant message
    answer its calls in order, and get their ids."""
    raw = body.get("messages")
    out: list[Any] = []
    pending: list[str] = []
    for m in raw if isinstance(raw, list) else ():
        role = m.get("role") if isinstance(m, Mapping) else None
        seen = message(m, pending.pop(0) if role == "tool" and pending else None)
        if role == "assistant":
            pending = [c["id"] for c in seen.get("tool_calls", ())]
        out.append(seen)
    return out


def unview(messages: Sequence[Any]) -> list[Any]:
    """The client's messages rebuilt from the view alone: ``unview(view(body))`` equals
    ``body["messages"]``."""
    return [{"role": m.get("role"), **(m.get("ollama") or {})} if isinstance(m, Mapping)
            else m for m in messages]


def forward(body: Mapping[str, Any], seen: Sequence[Any],
            placed: Sequence[Mapping[str, Any] | None]) -> list[Any] | None:
    """The client's messages with what the engine changed in ``placed`` (the view's
    messages, None where one was left out) put back, or None when a change is not one this
    door can put back (the request then goes as sent): the memory block before the text
    of a user message; a degraded tool result's new content; an evicted exchange (the
    assistant message of its calls and their results) left out whole, or some of its
    calls left out with their results."""
    original = list(body.get("messages") or ())
    if len(placed) != len(seen):
        return None
    out: list[Any] = []
    for at, (mine, theirs) in enumerate(zip(placed, seen, strict=True)):
        if mine is theirs:
            out.append(original[at])
            continue
        role = theirs.get("role") if isinstance(theirs, Mapping) else None
        if mine is None:
            if role not in ("assistant", "tool"):
                return None
            continue
        if role == "assistant":
            narrowed = _narrowed(original[at], theirs, mine)
            if narrowed is None:
                return None
            out.append(narrowed)
            continue
        if role not in ("user", "tool") or not isinstance(mine.get("content"), str):
            return None
        out.append({**original[at], "content": mine["content"]})
    return out


def _narrowed(raw: Mapping[str, Any], theirs: Mapping[str, Any],
              mine: Mapping[str, Any]) -> dict[str, Any] | None:
    """The client's assistant message with only the calls ``mine`` kept of ``theirs``
    (the others' results were evicted), or None when something else changed. The
    results that stay answer the calls that stay in the same order, which is how Ollama
    pairs them."""
    if {k: v for k, v in mine.items() if k != "tool_calls"} != \
            {k: v for k, v in theirs.items() if k != "tool_calls"}:
        return None
    kept = {c.get("id") for c in mine.get("tool_calls") or () if isinstance(c, Mapping)}
    # the client's calls that have a place in the view, in its order
    calls = [c for c in raw.get("tool_calls") or ()
             if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)]
    ids = [c["id"] for c in theirs.get("tool_calls") or ()]
    if len(calls) != len(ids) or not kept <= set(ids):
        return None
    left = [c for c, ident in zip(calls, ids, strict=True) if ident in kept]
    out = {k: v for k, v in raw.items() if k != "tool_calls"}
    if left:
        out["tool_calls"] = left
    return out


def side_body(body: Mapping[str, Any], seen: list[Any]) -> dict[str, Any]:
    """What :func:`memd.engine.conversation.side.side_reason` reads of an Ollama chat request: its
    messages in the conversation model, its tools, its answer limit
    (``options.num_predict``) and a structured ``format`` (a client asking for data,
    such as a title, as JSON or by a JSON schema) as the response format."""
    options = body.get("options")
    limit = options.get("num_predict") if isinstance(options, Mapping) else None
    out: dict[str, Any] = {"messages": seen, "tools": body.get("tools"), "max_tokens": limit}
    fmt = body.get("format")
    if fmt == "json" or isinstance(fmt, Mapping):
        out["response_format"] = {"type": "json_schema"}
    return out


def num_ctx(body: Mapping[str, Any]) -> int | None:
    """The window the client asks the model to run with (``options.num_ctx``)."""
    options = body.get("options")
    value = options.get("num_ctx") if isinstance(options, Mapping) else None
    if isinstance(value, float) and value.is_integer():  # JSON does not tell 3.0 from 3
        value = int(value)
    return value if isinstance(value, int) and is_count(value) and value > 0 else None


def assistant(raw: Any) -> dict[str, Any]:
    """An answer's message in the conversation model, as memd stores it."""
    return dict(sanitized(message(raw if isinstance(raw, Mapping) else {})))


def usage(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The timing fields of an answer's last object, with memd's own counts added."""
    found = {k: data[k] for k in _TIMINGS if is_count(data.get(k))}
    if not found:
        return None
    return {**found, "prompt_tokens": found.get("prompt_eval_count", 0),
            "completion_tokens": found.get("eval_count", 0)}


def whole(data: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None,
                                             dict[str, Any] | None]:
    """A whole Ollama chat answer's (reply, done reason, usage)."""
    raw, reason = data.get("message"), data.get("done_reason")
    return (assistant(raw) if isinstance(raw, Mapping) else None,
            clean_chars(reason) if isinstance(reason, str) else None, usage(data))


class StreamReply:
    """Rebuilds the reply from an NDJSON answer as it passes through: the content and
    thinking pieces joined, the tool calls, the done reason, the timings and the model.
    A chunk may end mid-line; a line that is not a JSON object (an ``{"error": ...}``
    is one, but holds no message) adds nothing."""

    def __init__(self) -> None:
        self._buffer = b""
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.tool_calls: list[Any] = []
        self.finish_reason: str | None = None
        self.model: str | None = None
        self._usage: dict[str, Any] | None = None
        self.done = False

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip():
                self._line(line)

    def _line(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if not isinstance(event, dict):
            return
        if isinstance(event.get("model"), str):
            self.model = event["model"]
        piece = event.get("message")
        if isinstance(piece, Mapping):
            if isinstance(piece.get("content"), str):
                self.content.append(piece["content"])
            if isinstance(piece.get("thinking"), str):
                self.thinking.append(piece["thinking"])
            if isinstance(piece.get("tool_calls"), list):
                self.tool_calls.extend(piece["tool_calls"])
        if event.get("done") is True:
            self.done = True
            reason = event.get("done_reason")
            self.finish_reason = reason if isinstance(reason, str) else "stop"
            self._usage = usage(event)

    @property
    def usage(self) -> dict[str, Any] | None:
        return self._usage

    def reply(self) -> dict[str, Any]:
        """The assistant message so far, in the conversation model."""
        raw: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.thinking:
            raw["thinking"] = "".join(self.thinking)
        if self.tool_calls:
            raw["tool_calls"] = self.tool_calls
        return assistant(raw)
