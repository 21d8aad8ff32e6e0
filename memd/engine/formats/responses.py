"""The OpenAI Responses format seen as memd's conversation model, and back.

A Responses request carries ``instructions`` and a list of ``input`` items: messages
(whose text parts are ``input_text`` / ``output_text``), the model's ``function_call``
items and their ``function_call_output``, ``reasoning`` items (with
``encrypted_content`` when the client keeps no state upstream), and more. :func:`view`
converts a request into the Chat Completions message list the engine works on, so that
one memory serves every door:

- ``instructions`` and developer or system message items become system messages;
- each user message item a user message, its text parts as ``text`` parts;
- what the model produced in one reply (reasoning, message and function call items in a
  row) one assistant message, its function calls as ``tool_calls``, every item kept as a
  content part: a reply stored whole is matched whole when the client resends it;
- each ``function_call_output`` (any ``*_output`` item) a tool message.

Text parts of any kind (``input_text``, ``output_text``) become ``text`` parts that keep
their kind as ``native``; what an item holds besides its content (its type, role, id,
status) is kept as ``item``, on the message or on each text part of a reply. So nothing
is lost, and :func:`unview`, the way back, gives the ``instructions`` and ``input`` the
client sent.

What goes upstream is the client's request, never the view converted back:
:func:`forward` only inserts the memory block, as an ``input_text`` part, into the user
message item the engine placed it in, and, when context virtualization holds a long
history within the window, replaces the ``output`` of the ``function_call_output``
items it degraded and takes out the ``function_call`` / output pairs it evicted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.engine.formats.sse import EventReply
from memd.engine.validate import is_count, sanitized

_TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True, slots=True)
class View:
    """A request in the conversation model: ``messages``, and for each the index of the
    client's input item it came from (-1: ``instructions``; -2: an ``input`` given as
    one string)."""

    messages: list[dict[str, Any]]
    origin: list[int]


def _part(part: Any, item: Mapping[str, Any] | None = None) -> Any:
    """A message item's content part in the conversation model: a text part of any kind
    becomes a ``text`` part that keeps its own kind as ``native`` (and every other field);
    a part of a reply's message item also names the item it came from (``item``)."""
    if not isinstance(part, Mapping):
        return part
    out = dict(part)
    if part.get("type") in _TEXT_PARTS:
        out["type"], out["native"] = "text", part["type"]
    elif item is None:
        return part
    if item is not None:
        out["item"] = item
    return out


def _parts(content: Any, item: Mapping[str, Any] | None = None) -> Any:
    """A message item's content with its text parts as ``text`` parts."""
    if not isinstance(content, list):
        return content
    return [_part(p, item) for p in content]


def _native(part: Any) -> Any:
    """A content part of the conversation model as the client sent it."""
    if not isinstance(part, Mapping) or not ("native" in part or "item" in part):
        return part
    out = {k: v for k, v in part.items() if k not in ("native", "item")}
    if "native" in part:
        out["type"] = part["native"]
    return out


def _natives(content: Any) -> Any:
    return [_native(p) for p in content] if isinstance(content, list) else content


def _kind(item: Mapping[str, Any]) -> str:
    """user, system, tool (a result the client sends back) or model (what a reply
    holds)."""
    kind = item.get("type")
    role = item.get("role")
    if kind in (None, "message") and role in ("system", "developer"):
        return "system"
    if kind in (None, "message") and role == "user":
        return "user"
    if isinstance(kind, str) and kind.endswith("_output"):
        return "tool"
    return "model"


def _without(item: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}


def reply(items: Sequence[Any]) -> dict[str, Any]:
    """The output items of one reply as one assistant message (see the module
    docstring): its function calls are also its ``tool_calls``, the text of its message
    items ``text`` parts that name their item."""
    content: list[Any] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function", "function": {
                "name": item.get("name"), "arguments": item.get("arguments")}})
            content.append(item)
        elif isinstance(item.get("content"), list) and item.get("role") == "assistant":
            content.extend(_parts(item["content"], _without(item, "content")))
        elif isinstance(item.get("content"), str) and item.get("role") == "assistant":
            content.append({"type": "text", "text": item["content"],
                            "item": _without(item, "content")})
        else:
            content.append(item)
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _items(content: Any) -> list[Any]:
    """An assistant message of the view as the reply items it came from."""
    out: list[Any] = []
    owner: Any = None  # the item the parts being gathered belong to
    for part in content if isinstance(content, list) else ():
        item = part.get("item") if isinstance(part, Mapping) else None
        if item is None:
            out.append(part)
            owner = None
        elif "native" not in part and part.get("type") == "text":  # a string content
            out.append({**item, "content": part["text"]})
            owner = None
        elif item is owner:
            out[-1]["content"].append(_native(part))
        else:
            out.append({**item, "content": [_native(part)]})
            owner = item
    return out


def _output(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, Mapping) for p in value):
        return _parts(value)
    return json.dumps(value, ensure_ascii=False)


def view(body: Mapping[str, Any]) -> View:
    """The request ``body`` in the conversation model (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    origin: list[int] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
        origin.append(-1)
    raw = body.get("input")
    if isinstance(raw, str):
        return View([*messages, {"role": "user", "content": raw}], [*origin, -2])
    pending: list[Any] = []  # the items of one reply, in a row
    first = 0
    for i, item in enumerate(raw if isinstance(raw, list) else ()):
        kind = _kind(item) if isinstance(item, Mapping) else "model"
        if kind == "model":
            if not pending:
                first = i
            pending.append(item)
            continue
        if pending:
            messages.append(reply(pending))
            origin.append(first)
            pending = []
        if kind == "tool":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id")
                             if isinstance(item.get("call_id"), str) else None,
                             "content": _output(item.get("output")),
                             "item": _without(item, "output")})
        else:
            messages.append({"role": kind, "content": _parts(item.get("content")),
                             "item": _without(item, "content")})
        origin.append(i)
    if pending:
        messages.append(reply(pending))
        origin.append(first)
    return View(messages, origin)


def unview(seen: View) -> dict[str, Any]:
    """The request fields ``seen`` was made of (``instructions`` when there were some,
    and ``input``), rebuilt from the view alone: ``unview(view(body))`` equals them."""
    out: dict[str, Any] = {}
    items: list[Any] = []
    for message, at in zip(seen.messages, seen.origin, strict=True):
        if at == -1:
            out["instructions"] = message["content"]
        elif at == -2:
            out["input"] = message["content"]
            return out
        elif message.get("role") == "assistant":
            items.extend(_items(message.get("content")))
        elif message.get("role") == "tool":
            item = dict(message.get("item") or {})
            if message.get("content") is not None:
                item["output"] = _natives(message["content"])
            items.append(item)
        else:
            item = dict(message.get("item") or {})
            if message.get("content") is not None:
                item["content"] = _natives(message["content"])
            items.append(item)
    out["input"] = items
    return out


def forward(body: Mapping[str, Any], seen: View,
            placed: Sequence[Mapping[str, Any] | None]) -> Any:
    """The client's ``input`` with what the engine changed in ``placed`` (the view's
    messages, None where one was left out) put back, or None when a change is not one
    this door can put back (the request then goes as sent): the memory block in a user
    message item; a degraded tool result as its output item with the new ``output``
    (``call_id`` and type stay); an evicted one taken out with its ``function_call``, and
    with the reasoning of its reply when nothing else of the reply is left (a reasoning
    item must be followed by what it reasoned towards)."""
    raw = body.get("input")
    if len(placed) != len(seen.messages):
        return None
    if isinstance(raw, str):  # one user message: the block goes before its text
        changed = [m for m, t in zip(placed, seen.messages, strict=True) if m is not t]
        added = changed[-1].get("content") if changed and changed[-1] is not None else raw
        return added if isinstance(added, str) and added.endswith(raw) else None
    items: list[Any] = list(raw) if isinstance(raw, list) else []
    gone: set[int] = set()
    for mine, theirs, at in zip(placed, seen.messages, seen.origin, strict=True):
        if mine is theirs:
            continue
        role = theirs.get("role")
        if at < 0 or (mine is None and role == "user"):
            return None
        if role == "tool":
            if mine is None:
                gone.add(at)
            else:
                items[at] = {**items[at], "output": mine.get("content")}
        elif role == "assistant":
            gone.update(_reply_left_out(items, at, mine))
        elif role == "user" and mine is not None:
            with_block = _with_block(items[at], mine.get("content"))
            if with_block is None:
                return None
            items[at] = with_block
        else:
            return None
    return [item for k, item in enumerate(items) if k not in gone]


def _with_block(item: Mapping[str, Any], added: Any) -> dict[str, Any] | None:
    """A user message item with the memory block the engine put before its text."""
    content = item.get("content")
    if isinstance(content, str) and isinstance(added, str):
        return {**item, "content": added}
    if isinstance(content, list) and isinstance(added, list) and added:
        return {**item, "content": [{"type": "input_text", "text": added[0]["text"]},
                                    *content]}
    return None


def _reply_left_out(items: Sequence[Any], first: int,
                    mine: Mapping[str, Any] | None) -> set[int]:
    """The indexes of the items of the reply starting at ``first`` that go: its
    function calls the engine evicted (those not among ``mine``'s ``tool_calls``), and
    every item of it when only reasoning would be left."""
    end = first
    while end < len(items) and isinstance(items[end], Mapping) \
            and _kind(items[end]) == "model":
        end += 1
    end = max(end, first + 1)
    calls = {c.get("id") for c in (mine or {}).get("tool_calls") or ()
             if isinstance(c, Mapping)}
    out = {k for k in range(first, end) if isinstance(items[k], Mapping)
           and items[k].get("type") == "function_call" and items[k].get("call_id") not in calls}
    left = [items[k] for k in range(first, end) if k not in out]
    if all(isinstance(i, Mapping) and i.get("type") == "reasoning" for i in left):
        return set(range(first, end))
    return out


def side_body(body: Mapping[str, Any], seen: View) -> dict[str, Any]:
    """What :func:`memd.engine.conversation.side.side_reason` reads of a Responses request."""
    out: dict[str, Any] = {"messages": seen.messages, "tools": body.get("tools"),
                           "max_tokens": body.get("max_output_tokens")}
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object"):
        out["response_format"] = {"type": fmt["type"]}
    return out


def usage(value: Any) -> dict[str, Any] | None:
    """A Responses usage object with memd's own counts and the cache figure added."""
    if not isinstance(value, Mapping):
        return None
    out = {k: n for k, n in value.items() if is_count(n)}
    details = value.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if is_count(cached):
        out["cache_read_input_tokens"] = cached
    return {**out, "prompt_tokens": out.get("input_tokens", 0),
            "completion_tokens": out.get("output_tokens", 0)}


def whole(data: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None,
                                             dict[str, Any] | None]:
    """A response object's (reply, status, usage); the reply names the response's id
    as ``response_id``, which a later request continues it by."""
    output = data.get("output")
    status = data.get("status")
    got = dict(sanitized(reply(output))) if isinstance(output, list) else None
    if got is not None and isinstance(data.get("id"), str):
        got["response_id"] = data["id"]
    return (got, status if isinstance(status, str) else None, usage(data.get("usage")))


class StreamReply(EventReply):
    """Rebuilds the reply from a Responses event stream as it passes through: the final
    ``response.completed`` (or ``incomplete`` / ``failed``) event holds the whole
    response; until then, the items done so far."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[Any] = []
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        response = event.get("response")
        if isinstance(response, Mapping) and isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if kind == "response.output_item.done" and isinstance(event.get("item"), Mapping):
            self.items.append(event["item"])
        elif kind in ("response.completed", "response.incomplete", "response.failed") \
                and isinstance(event.get("response"), Mapping):
            response = event["response"]
            got, status, used = whole(response)
            if got is not None:
                self.items = list(response["output"])
            self.finish_reason, self.usage = status, used
            self.model = response.get("model") if isinstance(response.get("model"), str) \
                else self.model
            self.done = True

    def reply(self) -> dict[str, Any]:
        out = dict(sanitized(reply(self.items)))
        if self.response_id is not None:
            out["response_id"] = self.response_id
        return out
