"""opencode: its data folder (``$XDG_DATA_HOME/opencode``, ``~/.local/share/opencode``
on Linux and macOS). Newer versions keep everything in the SQLite database
``opencode.db`` (tables ``session``, ``message`` and ``part``, each row's fields in a
JSON ``data`` column); older ones keep JSON files under ``storage/``:
``session/<project>/<session>.json``, ``message/<session>/<message>.json`` and
``part/<message>/<part>.json``, the same fields.

A session's ``directory`` is its workspace. A message is made of parts: ``text`` (a
``synthetic`` one is opencode's own, not the user's), ``tool`` (a call and, once done,
its output), and others (reasoning, steps, snapshots, files) that are not turns. A
session with a parent is a subagent's: the model talking to itself, skipped.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.errors import InvalidInput
from memd.imports.base import Source, home
from memd.imports.model import (
    Conversation,
    ToolCall,
    Turn,
    arguments,
    epoch,
    workspace_for,
)

NAME = "opencode"
DATABASE = "opencode.db"

Message = tuple[Mapping[str, Any], list[Mapping[str, Any]]]  # a message and its parts


def conversation(session: Mapping[str, Any], messages: list[Message]) -> Conversation | None:
    """A session's conversation from its messages (oldest first) and their parts."""
    if session.get("parentID") or session.get("parent_id"):
        return None
    turns: list[Turn] = []
    for message, parts in messages:
        role = message.get("role")
        time = message.get("time")
        at = epoch(time.get("created")) if isinstance(time, Mapping) else None
        text = "\n".join(str(p.get("text", "")) for p in parts
                         if p.get("type") == "text" and not p.get("synthetic")
                         and not p.get("ignored")).strip()
        if role == "user":
            turns.append(Turn("user", text, at))
            continue
        if role != "assistant":
            continue
        tools = [p for p in parts if p.get("type") == "tool"]
        calls = tuple(ToolCall(str(p.get("callID", "")), str(p.get("tool", "")),
                               arguments(_state(p).get("input", {}))) for p in tools)
        turns.append(Turn("assistant", text, at, calls))
        for p in tools:
            output = _state(p).get("output") or _state(p).get("error")
            if isinstance(output, str):
                turns.append(Turn("tool", output, at, tool_call_id=str(p.get("callID", ""))))
    if not turns:
        return None
    created = session.get("time")
    return Conversation(NAME, str(session["id"]), tuple(turns), client="opencode",
                        workspace=workspace_for(session.get("directory")),
                        title=session.get("title") or None,
                        created_at=epoch(created.get("created"))
                        if isinstance(created, Mapping) else None)


def _state(part: Mapping[str, Any]) -> Mapping[str, Any]:
    state = part.get("state")
    return state if isinstance(state, Mapping) else {}


def read_database(path: Path) -> list[Conversation]:
    """The sessions of an ``opencode.db``, read without writing to it."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidInput(f"cannot open {path}: {exc}") from None
    try:
        sessions = db.execute("SELECT id, parent_id, directory, title, time_created "
                              "FROM session ORDER BY time_created, id").fetchall()
        rows = db.execute("SELECT id, session_id, time_created, data FROM message "
                          "ORDER BY session_id, time_created, id").fetchall()
        part_rows = db.execute("SELECT message_id, data FROM part "
                               "ORDER BY message_id, time_created, id").fetchall()
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path} is not an opencode database: {exc}") from None
    finally:
        db.close()
    parts: dict[str, list[Mapping[str, Any]]] = {}
    for message_id, data in part_rows:
        parts.setdefault(message_id, []).append(_json(data, path))
    by_session: dict[str, list[Message]] = {}
    for message_id, session_id, created, data in rows:
        message = {"time": {"created": created}, **_json(data, path)}
        by_session.setdefault(session_id, []).append((message, parts.get(message_id, [])))
    out = []
    for sid, parent, directory, title, created in sessions:
        found = conversation({"id": sid, "parentID": parent, "directory": directory,
                              "title": title, "time": {"created": created}},
                             by_session.get(sid, []))
        if found is not None:
            out.append(found)
    return out


def read_storage_session(path: Path) -> list[Conversation]:
    """One session file of the older ``storage/`` layout, with its messages and parts."""
    storage = path.parent.parent.parent
    session = _json(_bytes(path), path)
    messages: list[Message] = []
    for file in sorted((storage / "message" / str(session.get("id", ""))).glob("*.json")):
        message = _json(_bytes(file), file)
        part_files = sorted((storage / "part" / str(message.get("id", ""))).glob("*.json"))
        messages.append((message, [_json(_bytes(p), p) for p in part_files]))
    messages.sort(key=lambda m: (epoch((m[0].get("time") or {}).get("created")) or 0.0,
                                 str(m[0].get("id", ""))))
    found = conversation(session, messages)
    return [found] if found is not None else []


def read(path: Path) -> list[Conversation]:
    return read_database(path) if path.suffix == ".db" else read_storage_session(path)


def files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InvalidInput(f"{path} does not exist")
    if (path / DATABASE).is_file():
        return [path / DATABASE]
    storage = path if (path / "session").is_dir() else path / "storage"
    return sorted(storage.glob("session/*/*.json"))


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None


def _json(data: str | bytes, where: Path) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{where} holds data that is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} holds JSON that is not an object")
    return value


def _defaults() -> list[Path]:
    """opencode's data folder: ``$XDG_DATA_HOME/opencode``, else
    ``~/.local/share/opencode`` (on macOS too: it follows the XDG layout there)."""
    data = os.environ.get("XDG_DATA_HOME", "").strip()
    return [(Path(data) if data else home(".local", "share")) / "opencode"]


SOURCE = Source(NAME, "opencode", _defaults, files, None, read)
