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
from collections.abc import Mapping, Sequence
from typing import Any

from memd.engine.formats import completions as c
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
