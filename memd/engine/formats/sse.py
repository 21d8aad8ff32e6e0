"""Server-sent events read as they pass through: what the proxy's doors share to rebuild
a streamed reply for storage while relaying the stream unchanged."""

from __future__ import annotations

import json
from typing import Any


class DataEvents:
    """Splits a server-sent event stream into its ``data:`` payloads as chunks arrive (a
    chunk may end mid-event); a subclass reads each payload in :meth:`_data`."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> None:
        self._buffer = (self._buffer + data).replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            for line in event.splitlines():
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())

    def _data(self, payload: bytes) -> None:
        raise NotImplementedError


class EventReply(DataEvents):
    """Reads a reply's stream of JSON events (the Messages and Responses APIs): what
    every such reader learns, the reply's model, why it finished and whether the stream
    ended; a subclass reads each event in :meth:`_event`."""

    def __init__(self) -> None:
        super().__init__()
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.done = False

    def _data(self, payload: bytes) -> None:
        event = json_event(payload)
        if event is not None:
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError


def json_event(payload: bytes) -> dict[str, Any] | None:
    """An event's data as a JSON object, or None when it is not one (a ``[DONE]``, a
    comment, a broken chunk: the client gets it as sent, memd reads nothing from it)."""
    try:
        event = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None
