"""What the fault loop (:mod:`memd.server.faults`) needs to know of each API's format.

The loop itself is the same for every door: offer memd's tools, find memd's calls in the
reply, serve them, ask again with the reply and the results appended, and let the client
see only the final answer. Each format says how: the tools in its shape, the calls of a
whole reply or of a streamed one (in the Chat Completions form memd's tools are served
in), the turns to append, a reply without memd's calls, and how the events of a later
round go to a client that already got the first round's start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memd.engine.formats import anthropic as a
from memd.engine.formats import completions as c
from memd.engine.formats.sse import json_event
from memd.engine.virtual import faults as f
from memd.server.upstream import encode_body

Calls = Sequence[Mapping[str, Any]]


class FaultFormat:
    """The Chat Completions format; other formats override what differs."""

    field = "messages"  # the body's field holding the conversation

    def tools(self, tools: Any) -> list[Any]:
        """The request's tools with memd's two added."""
        return f.with_tools(tools)

    def whole(self, data: Any) -> tuple[list[dict[str, Any]], Calls] | None:
        """A whole answer's assistant turn(s) as they are sent back, and its tool calls
        (None: not an answer memd can read)."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            return None
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            return None
        calls = list(message.get("tool_calls") or ())
        ours, _ = f.split_calls(calls)
        return [{"role": "assistant", "content": message.get("content"),
                 "tool_calls": ours}], calls

    def results(self, ours: Calls, texts: Sequence[str]) -> list[dict[str, Any]]:
        """The items answering memd's calls, for the next round."""
        return [{"role": "tool", "tool_call_id": tc.get("id"), "content": text}
                for tc, text in zip(ours, texts, strict=True)]

    def strip_whole(self, data: dict[str, Any]) -> dict[str, Any]:
        """A whole answer without memd's calls; one left with no call ends as done."""
        choices = data["choices"]
        message = strip(choices[0]["message"])
        choices[0] = {**choices[0], "message": message}
        if "tool_calls" not in message and choices[0].get("finish_reason") == "tool_calls":
            choices[0]["finish_reason"] = "stop"
        return data

    def reader(self) -> Any:
        return c.StreamReply()

    def holding(self, acc: Any) -> bool:
        """Whether a streamed round has started a tool call (held from there on)."""
        return bool(acc.tool_calls)

    def streamed(self, acc: Any) -> tuple[list[dict[str, Any]], Calls]:
        """A streamed round's assistant turn and tool calls, as :meth:`whole`."""
        reply = acc.reply()
        calls = list(reply.get("tool_calls") or ())
        ours, _ = f.split_calls(calls)
        return [{"role": "assistant", "content": reply.get("content"),
                 "tool_calls": ours}], calls

    def stored(self, acc: Any) -> dict[str, Any]:
        """What is stored of a streamed round whose memd calls were taken out."""
        return strip(acc.reply())

    def strip_stream(self, held: bytes, acc: Any) -> bytes:
        return _without_ours(held, {i for i, tc in acc.tool_calls.items()
                                    if tc["function"]["name"] in f.NAMES_OF_TOOLS})

    def relay(self) -> Relay:
        """What the events of each round become for the client (see :class:`Relay`)."""
        return Relay()


class Relay:
    """Passes a round's events to the client; the Chat Completions stream needs no
    change between rounds (its chunks only add to the reply)."""

    def next_round(self) -> None:
        """A later round starts (its events continue the reply the client has)."""

    def shown_id(self) -> str | None:
        """The id the client was shown for the reply, when it is not the last round's
        (a Responses stream keeps its first round's id); else None."""
        return None

    def __call__(self, chunk: bytes) -> bytes:
        return chunk


def strip(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions message without memd's calls."""
    _, theirs = f.split_calls(message.get("tool_calls") or ())
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    if theirs:
        out["tool_calls"] = theirs
    return out


def _without_ours(raw: bytes, ours: set[int]) -> bytes:
    """SSE events with memd's tool calls (by their index) taken out and the client's
    numbered from 0; a choice whose reply ends with only memd's calls ends as "stop"."""
    keep = 0
    index: dict[int, int] = {}
    out: list[bytes] = []
    for event in raw.split(b"\n\n"):
        text = event.strip()
        if not text.startswith(b"data:") or text == b"data: [DONE]":
            out.append(event)
            continue
        try:
            chunk = json.loads(text[5:])
        except json.JSONDecodeError:
            out.append(event)
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            calls = []
            for tc in delta.get("tool_calls") or ():
                i = int(tc.get("index", 0))
                if i in ours:
                    continue
                if i not in index:
                    index[i] = keep
                    keep += 1
                calls.append({**tc, "index": index[i]})
            if "tool_calls" in delta:
                delta["tool_calls"] = calls
                if not calls:
                    del delta["tool_calls"]
            if choice.get("finish_reason") == "tool_calls" and not index:
                choice["finish_reason"] = "stop"
        out.append(b"data: " + encode_body(chunk))
    return b"\n\n".join(out)


CHAT_FAULTS = FaultFormat()


def _ours(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_use" \
        and block.get("name") in f.NAMES_OF_TOOLS


class MessagesFaults(FaultFormat):
    """The Anthropic Messages format: memd's tools as ``name``, ``description`` and
    ``input_schema``; its calls are ``tool_use`` blocks, answered by ``tool_result``
    blocks in the next user turn; a streamed later round's events continue the message
    the client already has (its ``message_start`` left out, its blocks numbered on)."""

    def tools(self, tools: Any) -> list[Any]:
        own = list(tools) if isinstance(tools, list) else []
        named = {t.get("name") for t in own if isinstance(t, Mapping)}
        if named & f.NAMES_OF_TOOLS:  # the client's own of those names: its own
            return own
        return [*own, *({"name": t["function"]["name"],
                         "description": t["function"]["description"],
                         "input_schema": t["function"]["parameters"]} for t in f.TOOLS)]

    def whole(self, data: Any) -> tuple[list[dict[str, Any]], Calls] | None:
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list):
            return None
        return self._turn(content)

    @staticmethod
    def _turn(blocks: list[Any]) -> tuple[list[dict[str, Any]], Calls]:
        calls = a.assistant(blocks).get("tool_calls") or []
        return [{"role": "assistant", "content": blocks}], calls

    def results(self, ours: Calls, texts: Sequence[str]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tc.get("id"), "content": text}
            for tc, text in zip(ours, texts, strict=True)]}]

    def strip_whole(self, data: dict[str, Any]) -> dict[str, Any]:
        content = [b for b in data["content"] if not _ours(b)]
        out = {**data, "content": content}
        if out.get("stop_reason") == "tool_use" and not any(
                isinstance(b, Mapping) and b.get("type") == "tool_use" for b in content):
            out["stop_reason"] = "end_turn"
        return out

    def reader(self) -> Any:
        return a.StreamReply()

    def holding(self, acc: Any) -> bool:
        return any(b.get("type") == "tool_use" for b in acc.blocks.values())

    def streamed(self, acc: Any) -> tuple[list[dict[str, Any]], Calls]:
        return self._turn([acc.blocks[i] for i in sorted(acc.blocks)])

    def stored(self, acc: Any) -> dict[str, Any]:
        return stored_without(acc, _ours)

    def strip_stream(self, held: bytes, acc: Any) -> bytes:
        """The held events without those of memd's ``tool_use`` blocks, the rest
        numbered on from the first left out; a message left with no tool call ends as
        ``end_turn``."""
        ours = {i for i, b in acc.blocks.items() if _ours(b)}
        theirs = any(b.get("type") == "tool_use" and i not in ours
                     for i, b in acc.blocks.items())

        def fix(data: dict[str, Any]) -> None:
            delta = data.get("delta")
            if data.get("type") == "message_delta" and isinstance(delta, dict) \
                    and delta.get("stop_reason") == "tool_use" and not theirs:
                delta["stop_reason"] = "end_turn"

        return without(held, "index", ours, fix)

    def relay(self) -> Relay:
        return MessagesRelay()


class MessagesRelay(Relay):
    """The first round's events go as they came; a later round's continue the message
    the client has: no second ``message_start``, content blocks numbered after the ones
    it got."""

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._next = 0  # the number of the next block the client would see
        self._later = False

    def next_round(self) -> None:
        self._offset, self._later, self._buffer = self._next, True, b""

    def __call__(self, chunk: bytes) -> bytes:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        *done, self._buffer = self._buffer.split(b"\n\n")
        out: list[bytes] = []
        for event in done:
            data = json_event(data_of(event))
            if data is not None and isinstance(data.get("index"), int):
                data["index"] += self._offset
                self._next = max(self._next, data["index"] + 1)
            if not self._later:
                continue
            if data is None:
                out.append(event + b"\n\n")
            elif data.get("type") != "message_start":
                out.append(sse_event(data))
        return chunk if not self._later else b"".join(out)


def stored_without(acc: Any, ours: Callable[[Any], bool]) -> dict[str, Any]:
    """A streamed reply as stored, without memd's calls and the content parts (blocks,
    items) that made them."""
    reply = strip(acc.reply())
    if isinstance(reply.get("content"), list):
        reply["content"] = [p for p in reply["content"] if not ours(p)]
    return reply


def without(held: bytes, key: str, ours: set[int],
            fix: Callable[[dict[str, Any]], None]) -> bytes:
    """Typed events without those of the parts numbered ``ours`` (by ``key``), the rest
    numbered on from the first left out, each also given to ``fix``."""
    out: list[bytes] = []
    for event in events(held):
        data = json_event(data_of(event))
        if data is None:
            out.append(event + b"\n\n")
            continue
        index = data.get(key)
        if isinstance(index, int):
            if index in ours:
                continue
            data[key] = index - sum(1 for i in ours if i < index)
        fix(data)
        out.append(sse_event(data))
    return b"".join(out)


def events(raw: bytes) -> list[bytes]:
    """The complete events of a stream's bytes."""
    return [e for e in raw.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]


def data_of(event: bytes) -> bytes:
    """An event's data, its ``data:`` lines joined."""
    return b"".join(line[5:].strip() for line in event.splitlines()
                    if line.startswith(b"data:"))


def sse_event(data: Mapping[str, Any]) -> bytes:
    """An event as the Messages and Responses APIs frame it: its type, then its data."""
    return b"event: " + str(data.get("type")).encode() + b"\ndata: " + encode_body(
        dict(data)) + b"\n\n"


MESSAGES_FAULTS = MessagesFaults()
