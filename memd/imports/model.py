"""What every history source reads into: a conversation of turns, in one shape.

A source (:mod:`memd.imports.sources`) turns a client's own files into
:class:`Conversation` values; the write path (:mod:`memd.imports.write`) stores them.
Nothing here knows a file format or the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd.errors import InvalidInput

_NOT_ID = re.compile(r"[^A-Za-z0-9._:@-]+")


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: its id, the tool's name and its arguments (JSON text)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Turn:
    """One message of a conversation as the client recorded it.

    ``role`` is ``user``, ``assistant`` or ``tool`` (a tool's result, answering
    ``tool_call_id``). ``at`` is when the client recorded it (seconds since the epoch),
    None when the format keeps no time for it. ``line`` is the client's own id of the
    record it was read from, for a format whose files can repeat each other's records
    (a resumed Claude Code session): the write path finds where it left off by it."""

    role: str
    text: str
    at: float | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    line: str | None = None


@dataclass(frozen=True)
class Conversation:
    """One conversation of one client. ``key`` is stable across reads of a growing file
    (the client's own id for it), so a second import finds what the first one stored.
    ``part`` names the file it was read from when several files hold the same
    conversation, each growing on its own (a resumed Claude Code session and the one it
    resumed); None when one file holds it."""

    source: str
    key: str
    turns: tuple[Turn, ...]
    client: str
    workspace: str | None = None
    title: str | None = None
    created_at: float | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    part: str | None = None

    @property
    def first_at(self) -> float | None:
        """When the conversation started, as far as the file says."""
        times = [t.at for t in self.turns if t.at is not None]
        return self.created_at if self.created_at is not None else min(times, default=None)


def workspace_for(directory: str | None) -> str | None:
    """The memd workspace of a client's project folder: the folder's name, as the
    ``/w/<name>/v1`` base URL of a client configured for that project names it; None
    for no folder, or the home folder (no project)."""
    if not directory:
        return None
    path = Path(directory.rstrip("/\\").replace("\\", "/"))
    if str(path) in ("", ".", "/") or path == Path.home():
        return None
    name = _NOT_ID.sub("-", path.name).lstrip("._:@-")[:128]
    return name or None


def epoch(value: Any) -> float | None:
    """A time as clients write it (ISO 8601 text, seconds or milliseconds since the
    epoch) in seconds since the epoch; None for none or one unreadable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        # milliseconds once past the year 33658 in seconds: no client writes those
        return float(value) / 1000.0 if value > 1e12 else float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.replace(".", "", 1).isdigit():
            return epoch(float(text))
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    return None


def load_json(data: bytes, name: str) -> Any:
    """``data`` parsed as JSON; InvalidInput naming the file when it is not."""
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{name} is not valid JSON: {exc}") from None


def block_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(str(b.get("text", "")) for b in content
                         if isinstance(b, Mapping) and b.get("type") in ("text", "input_text")
                         and b.get("text"))
    return ""


def tool_uses(content: Any) -> tuple[ToolCall, ...]:
    """The calls among Anthropic content blocks (``tool_use``), as tool calls."""
    blocks = content if isinstance(content, list) else []
    return tuple(ToolCall(str(b.get("id", "")), str(b.get("name", "")),
                          arguments(b.get("input", {})))
                 for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_use")


def arguments(value: Any) -> str:
    """A tool call's arguments as the JSON text the OpenAI format carries."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                            sort_keys=True)


def expect(condition: bool, name: str, what: str) -> None:
    """InvalidInput saying what ``name`` lacks to be read, unless ``condition``."""
    if not condition:
        raise InvalidInput(f"{name} is not {what}")
