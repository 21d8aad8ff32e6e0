"""Continue: ``~/.continue/sessions/<session id>.json``, one session a file.

A session file holds ``sessionId``, ``title``, ``workspaceDirectory`` and ``history``, a
list of items whose ``message`` has a ``role`` and a ``content`` (a string or parts);
an assistant message may carry ``toolCalls``, and its item the calls' ``toolCallStates``
(``toolCallState`` in older versions), whose ``output`` items hold what each tool
returned. The CLI writes only those; the VS Code extension also writes a ``tool``
message for the call (with its ``toolCallId``), and then that message is the one read.
``CONTINUE_GLOBAL_DIR`` moves ``~/.continue``. The files keep no time per message;
``sessions.json`` beside them lists each session's ``dateCreated``, which the turns get
(else the file's modification time). The ``sessions.json`` index itself is not a session.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memd.errors import InvalidInput
from memd.imports.base import Source, home
from memd.imports.model import (
    Conversation,
    ToolCall,
    Turn,
    arguments,
    block_text,
    epoch,
    expect,
    load_json,
    workspace_for,
)

NAME = "continue"
_ROLES = {"user": "user", "assistant": "assistant", "tool": "tool"}


def parse(data: bytes, name: str, created: float | None = None) -> list[Conversation]:
    raw = load_json(data, name)
    expect(isinstance(raw, Mapping) and isinstance(raw.get("history"), list), name,
           "a Continue session (an object with a history list)")
    key = raw.get("sessionId") or Path(name).stem
    answered = {str(i["message"].get("toolCallId")) for i in raw["history"]
                if isinstance(i, Mapping) and isinstance(i.get("message"), Mapping)
                and i["message"].get("role") == "tool"}
    turns = tuple(t for item in raw["history"] for t in _turns(item, created, answered))
    if not turns:
        return []
    return [Conversation(NAME, str(key), turns, client="continue",
                         workspace=workspace_for(_folder(raw.get("workspaceDirectory"))),
                         title=raw.get("title") or None, created_at=created)]


def _folder(value: Any) -> str | None:
    """A workspace folder, also as the ``file://`` URI newer versions write."""
    if not isinstance(value, str) or not value:
        return None
    return value[len("file://"):] if value.startswith("file://") else value


def _turns(item: Any, at: float | None, answered: set[str]) -> Iterator[Turn]:
    """An item's message, then what its tool calls returned (unless a ``tool`` message
    of the session, in ``answered``, holds it already)."""
    message = item.get("message") if isinstance(item, Mapping) else None
    if not isinstance(message, Mapping):
        return
    role = _ROLES.get(str(message.get("role")))
    if role is None:
        return
    calls = tuple(ToolCall(str(c.get("id", "")), str(_function(c).get("name", "")),
                           arguments(_function(c).get("arguments", "")))
                  for c in message.get("toolCalls") or [] if isinstance(c, Mapping))
    yield Turn(role, block_text(message.get("content")), at, calls,
               tool_call_id=message.get("toolCallId") if role == "tool" else None)
    single = item.get("toolCallState")  # what versions before several calls a turn wrote
    for state in item.get("toolCallStates") or ([single] if single else []):
        outputs = state.get("output") if isinstance(state, Mapping) else None
        if isinstance(outputs, list) and state.get("toolCallId") \
                and str(state["toolCallId"]) not in answered:
            yield Turn("tool", "\n".join(str(o.get("content", "")) for o in outputs
                                         if isinstance(o, Mapping)), at,
                       tool_call_id=str(state["toolCallId"]))


def _function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = call.get("function")
    return fn if isinstance(fn, Mapping) else {}


def read(path: Path) -> list[Conversation]:
    """A session file, its turns dated from the ``sessions.json`` beside it."""
    try:
        data = path.read_bytes()
        stamp: float | None = path.stat().st_mtime
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    index = path.with_name("sessions.json")
    try:
        listed = json.loads(index.read_text("utf-8")) if index.is_file() else []
    except (OSError, ValueError):
        listed = []
    for entry in listed if isinstance(listed, list) else []:
        if isinstance(entry, Mapping) and entry.get("sessionId") == path.stem:
            stamp = epoch(entry.get("dateCreated")) or stamp
    return parse(data, str(path), stamp)


def files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InvalidInput(f"{path} does not exist")
    return sorted(f for f in path.glob("*.json") if f.name != "sessions.json")


def _defaults() -> list[Path]:
    folder = os.environ.get("CONTINUE_GLOBAL_DIR", "").strip()
    return [(Path(folder) if folder else home(".continue")) / "sessions"]


SOURCE = Source(NAME, "continue", _defaults, files, parse, read)
