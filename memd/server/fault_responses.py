"""The fault loop's view of the OpenAI Responses format (memd.server.fault_formats says
what the loop needs of a format).

memd's tools go as function tools (``{"type": "function", "name", "parameters"}``); the
model calls them with ``function_call`` output items, answered in the next round by
``function_call_output`` input items after the reply's own items (its reasoning
included, which the API wants before the call it led to). A streamed later round
continues the response the client already has: no second ``response.created``, its
output items numbered after the ones the client got, its sequence numbers going on,
its id the first round's (a stream is one response to the SDKs), and its final
response listing those earlier items first. The id memd links to the session, for a
later request that continues the response, is the last round's: the one the model
server keeps with the whole exchange. The id the client saw (the first round's, which
the model server holds ending on memd's call) is linked too, and the stored reply
records both, so a client continuing by it continues the last round
(memd.server.responses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memd.engine.formats import responses as r
from memd.engine.formats.sse import json_event
from memd.engine.virtual import faults as f
from memd.server.fault_formats import (
    Calls,
    FaultFormat,
    Relay,
    data_of,
    sse_event,
    stored_without,
    without,
)

_FINAL = ("response.completed", "response.incomplete", "response.failed")
_STARTS = ("response.created", "response.in_progress", "response.queued")


def _ours(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "function_call" \
        and item.get("name") in f.NAMES_OF_TOOLS


class _Reader(r.StreamReply):
    """The stream's reply, and whether a function call item has started."""

    def __init__(self) -> None:
        super().__init__()
        self.calling = False

    def _data(self, payload: bytes) -> None:
        super()._data(payload)
        event = json_event(payload)
        item = event.get("item") if event is not None else None
        if event is not None and event.get("type") == "response.output_item.added" \
                and isinstance(item, Mapping) and item.get("type") == "function_call":
            self.calling = True


class ResponsesFaults(FaultFormat):
    field = "input"

    def tools(self, tools: Any) -> list[Any]:
        own = list(tools) if isinstance(tools, list) else []
        named = {t.get("name") for t in own if isinstance(t, Mapping)}
        if named & f.NAMES_OF_TOOLS:  # the client's own of those names: its own
            return own
        return [*own, *({"type": "function", **t["function"]} for t in f.TOOLS)]

    def whole(self, data: Any) -> tuple[list[dict[str, Any]], Calls] | None:
        output = data.get("output") if isinstance(data, dict) else None
        if not isinstance(output, list):
            return None
        return self._turn(output)

    @staticmethod
    def _turn(items: list[Any]) -> tuple[list[dict[str, Any]], Calls]:
        calls = r.reply(items).get("tool_calls") or []
        return [dict(i) for i in items if isinstance(i, Mapping)], calls

    def results(self, ours: Calls, texts: Sequence[str]) -> list[dict[str, Any]]:
        return [{"type": "function_call_output", "call_id": tc.get("id"), "output": text}
                for tc, text in zip(ours, texts, strict=True)]

    def strip_whole(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "output": [i for i in data["output"] if not _ours(i)]}

    def reader(self) -> Any:
        return _Reader()

    def holding(self, acc: Any) -> bool:
        return bool(acc.calling)

    def streamed(self, acc: Any) -> tuple[list[dict[str, Any]], Calls]:
        return self._turn(list(acc.items))

    def stored(self, acc: Any) -> dict[str, Any]:
        return stored_without(acc, _ours)

    def strip_stream(self, held: bytes, acc: Any) -> bytes:
        """The held events without those of memd's ``function_call`` items, the rest
        numbered on from the first left out."""
        ours = {i for i, item in enumerate(acc.items) if _ours(item)}

        def fix(data: dict[str, Any]) -> None:
            response = data.get("response")
            if data.get("type") in _FINAL and isinstance(response, dict) \
                    and isinstance(response.get("output"), list):
                response["output"] = [i for i in response["output"] if not _ours(i)]

        return without(held, "output_index", ours, fix)

    def relay(self) -> Relay:
        return ResponsesRelay()


class ResponsesRelay(Relay):
    """See the module docstring: the first round's events go as they came."""

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._next = 0  # the number of the next output item the client would see
        self._sequence = 0
        self._items: list[Any] = []  # the output items the client got, done
        self._earlier: list[Any] = []
        self._later = False
        self._id: Any = None  # the response's id, as the client first got it

    def next_round(self) -> None:
        self._offset, self._later, self._buffer = self._next, True, b""
        self._earlier = list(self._items)

    def shown_id(self) -> str | None:
        return self._id if self._later and isinstance(self._id, str) else None

    def __call__(self, chunk: bytes) -> bytes:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        *done, self._buffer = self._buffer.split(b"\n\n")
        out: list[bytes] = []
        for event in done:
            data = json_event(data_of(event))
            if data is None:
                if self._later:
                    out.append(event + b"\n\n")
                continue
            if self._later and data.get("type") in _STARTS:
                continue
            self._number(data)
            if self._later:
                out.append(sse_event(data))
        return chunk if not self._later else b"".join(out)

    def _number(self, data: dict[str, Any]) -> None:
        if isinstance(data.get("output_index"), int):
            data["output_index"] += self._offset
            self._next = max(self._next, data["output_index"] + 1)
        if isinstance(data.get("sequence_number"), int):
            if self._later:
                data["sequence_number"] = self._sequence + 1
            self._sequence = data["sequence_number"]
        if data.get("type") == "response.output_item.done":
            self._items.append(data.get("item"))
        response = data.get("response")
        if not isinstance(response, dict):
            return
        if not self._later:
            self._id = response.get("id", self._id)
        elif "id" in response and self._id is not None:
            response["id"] = self._id  # one stream is one response to its client
        if self._later and data.get("type") in _FINAL \
                and isinstance(response.get("output"), list):
            response["output"] = [*self._earlier, *response["output"]]


RESPONSES_FAULTS = ResponsesFaults()
