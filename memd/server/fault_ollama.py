"""The fault loop's view of Ollama's native chat format (memd.server.fault_formats says
what the loop needs of a format).

Ollama's tools have the Chat Completions shape (``{"type": "function", "function":
{name, description, parameters}}``), so memd's two go as they are. The model calls them
in ``message.tool_calls``, each call's ``arguments`` a JSON object, not a string; a
streamed answer carries a call whole, in one line. The next round appends the reply's
message with memd's calls, then one ``{"role": "tool", "content", "tool_name"}`` message
per result, in the calls' order, which is how Ollama pairs a result with its call.

A streamed answer is newline-delimited JSON with no indexes to renumber: a later round's
lines simply continue the reply the client has. Only the last round's ``done: true``
line reaches the client (an earlier round's comes after its call, and is held with it),
and it goes as it came, its counts and durations the last round's alone: they describe
the reply the client got and the prompt that produced it, which fits the window as a
client showing context use expects, and they are what the non-streamed answer (the last
round's object) and memd's stored usage say. The fault rounds are in the call report.

Every line that reaches the client passes :class:`OllamaRelay`, which takes memd's calls
out of it, and sends only whole lines: a call split across two network chunks would
otherwise leak its first half before memd knows it is one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memd.engine.formats import ollama as o
from memd.engine.virtual import faults as f
from memd.server.fault_formats import Calls, FaultFormat, Relay
from memd.server.upstream import encode_body


def _ours(call: Any) -> bool:
    function = call.get("function") if isinstance(call, Mapping) else None
    return isinstance(function, Mapping) and function.get("name") in f.NAMES_OF_TOOLS


def _message(raw: Mapping[str, Any], keep: bool) -> dict[str, Any]:
    """An Ollama message with only memd's tool calls (``keep``) or only the client's."""
    calls = [c for c in raw.get("tool_calls") or () if _ours(c) == keep]
    out = {k: v for k, v in raw.items() if k != "tool_calls"}
    if calls:
        out["tool_calls"] = calls
    return out


def _turn(raw: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Calls]:
    """The assistant message a round appends (memd's calls only: the client's are the
    client's to answer, and no further round follows a reply that makes them), and all
    the reply's calls in the Chat Completions form memd's tools are served in."""
    calls = o.assistant({"role": "assistant", "tool_calls": raw.get("tool_calls")})
    return [_message({"role": "assistant", "content": "", **raw}, keep=True)], \
        list(calls.get("tool_calls") or ())


def _streamed_message(acc: o.StreamReply) -> dict[str, Any]:
    """A streamed reply as the Ollama message it adds up to."""
    raw: dict[str, Any] = {"role": "assistant", "content": "".join(acc.content)}
    if acc.thinking:
        raw["thinking"] = "".join(acc.thinking)
    if acc.tool_calls:
        raw["tool_calls"] = list(acc.tool_calls)
    return raw


class OllamaFaults(FaultFormat):
    """Ollama's ``/api/chat`` (see the module docstring)."""

    def whole(self, data: Any) -> tuple[list[dict[str, Any]], Calls] | None:
        message = data.get("message") if isinstance(data, dict) else None
        if not isinstance(message, Mapping):
            return None
        return _turn(message)

    def results(self, ours: Calls, texts: Sequence[str]) -> list[dict[str, Any]]:
        return [{"role": "tool", "content": text,
                 "tool_name": (tc.get("function") or {}).get("name")}
                for tc, text in zip(ours, texts, strict=True)]

    def strip_whole(self, data: dict[str, Any]) -> dict[str, Any]:
        """The answer without memd's calls (Ollama's ``done_reason`` is "stop" with or
        without calls, so nothing else changes)."""
        return {**data, "message": _message(data["message"], keep=False)}

    def reader(self) -> o.StreamReply:
        return o.StreamReply()

    def holding(self, acc: Any) -> bool:
        return bool(acc.tool_calls)

    def streamed(self, acc: Any) -> tuple[list[dict[str, Any]], Calls]:
        return _turn(_streamed_message(acc))

    def stored(self, acc: Any) -> dict[str, Any]:
        """The reply without memd's calls, converted as the client will send it back
        (a call's id is made of its place among the reply's calls, so the client's are
        numbered as the client has them)."""
        return o.assistant(_message(_streamed_message(acc), keep=False))

    def strip_stream(self, held: bytes, acc: Any) -> bytes:
        """The held lines as they are: the relay takes memd's calls out of every line."""
        return held

    def relay(self) -> Relay:
        return OllamaRelay()


class OllamaRelay(Relay):
    """Sends whole lines only, each without memd's calls (see the module docstring); a
    line left with nothing to say (no text, no call, not the last) is left out."""

    def __init__(self) -> None:
        self._buffer = b""

    def next_round(self) -> None:
        self._buffer = b""  # the start of a line of the round memd answered

    def __call__(self, chunk: bytes) -> bytes:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if self._buffer.strip() and _json(self._buffer) is not None:
            lines.append(self._buffer)  # a last line sent without its newline
            self._buffer = b""
        return b"".join(_without_ours(line) for line in lines)


def _json(line: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _without_ours(line: bytes) -> bytes:
    """One line, with its newline, without memd's calls."""
    if b"tool_calls" not in line:
        return line + b"\n"
    data = _json(line)
    message = data.get("message") if data is not None else None
    if data is None or not isinstance(message, Mapping) \
            or not any(_ours(c) for c in message.get("tool_calls") or ()):
        return line + b"\n"
    left = _message(message, keep=False)
    if not (left.get("tool_calls") or left.get("content") or left.get("thinking")
            or data.get("done")):
        return b""
    return encode_body({**data, "message": left}) + b"\n"


OLLAMA_FAULTS = OllamaFaults()
