"""Cline: the conversations of its tasks, in either of the two layouts its versions write.

- The SDK's sessions (the ``cline`` CLI and newer extensions): a folder per session under
  ``~/.cline/data/sessions`` holding ``<id>.json`` (the manifest: ``cwd``,
  ``started_at``, the title) and ``<id>.messages.json`` (``{"messages": [...]}``, the
  Anthropic messages sent to the model, each with its ``ts`` in milliseconds). A
  subagent's messages are written beside them under another name: the model talking to
  itself, not read.
- The extension's tasks: a folder per task under ``tasks`` (in VS Code's globalStorage
  on Linux and macOS for older versions, in ``~/.cline/data`` for newer ones), named by
  the task's start time in milliseconds, holding ``api_conversation_history.json`` (a
  list of the same messages) and ``task_metadata.json``.

Cline writes its own text into user messages: the ``<environment_details>`` block of a
turn (whose ``# Current Working Directory (...)`` line names the workspace), tool
results (``tool_result`` blocks, or text opening ``[tool for 'x'] Result:``), resumption
notices; extraction leaves all of it out (:mod:`memd.engine.learning.templates`). The SDK wraps
what the user typed in ``<user_input mode="act">``: unwrapped here, as it is theirs.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.errors import InvalidInput
from memd.imports.base import Source, home
from memd.imports.model import (
    Conversation,
    Turn,
    arguments,
    block_text,
    epoch,
    expect,
    load_json,
    tool_uses,
    workspace_for,
)

NAME = "cline"
HISTORY = "api_conversation_history.json"
MESSAGES = ".messages.json"
EXTENSION = "saoudrizwan.claude-dev"
_CWD = re.compile(r"# Current Working Directory \((.+?)\) Files")
_USER_INPUT = re.compile(r"<user_input(?:\s[^>]*)?>(.*?)</user_input>", re.S)


def parse(data: bytes, name: str) -> list[Conversation]:
    """A task's ``api_conversation_history.json`` or a session's ``<id>.messages.json``
    (the manifest beside it, when there is one, gives the folder and start time)."""
    raw = load_json(data, name)
    path = Path(name)
    if path.name.endswith(MESSAGES):
        expect(isinstance(raw, Mapping) and isinstance(raw.get("messages"), list), name,
               "a Cline session's messages (an object with a messages list)")
        key = str(raw.get("sessionId") or path.name[:-len(MESSAGES)])
        manifest = _manifest(path.with_name(f"{key}.json"))
        meta = manifest.get("metadata")
        title = _str(meta.get("title")) if isinstance(meta, Mapping) else None
        return _conversation(raw["messages"], key, epoch(manifest.get("started_at")),
                             _str(manifest.get("cwd")) or _str(manifest.get("workspace_root")),
                             title)
    expect(isinstance(raw, list), name, "a Cline conversation history (a list of messages)")
    task = path.parent.name
    return _conversation(raw, task or path.stem, epoch(int(task)) if task.isdigit() else None)


def _conversation(messages: list[Any], key: str, start: float | None,
                  cwd: str | None = None, title: str | None = None) -> list[Conversation]:
    turns: list[Turn] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        at = epoch(message.get("ts")) or start
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        text = block_text(content)
        found = _CWD.search(text)
        cwd = cwd or (found.group(1) if found else None)
        if message.get("role") == "assistant":
            turns.append(Turn("assistant", text, at, tool_uses(blocks)))
        elif message.get("role") == "user":
            for b in blocks:
                if isinstance(b, Mapping) and b.get("type") == "tool_result":
                    turns.append(Turn("tool", _result(b.get("content")), at,
                                      tool_call_id=str(b.get("tool_use_id", ""))))
            if text:
                turns.append(Turn("user", _USER_INPUT.sub(r"\1", text), at))
    if not turns:
        return []
    return [Conversation(NAME, key, tuple(turns), client="cline",
                         workspace=workspace_for(cwd), title=title, created_at=start)]


def _result(content: Any) -> str:
    """A tool result's text: its text blocks, else the SDK's structured result as JSON."""
    text = block_text(content)
    return text if text or not content else arguments(content)


def _manifest(path: Path) -> Mapping[str, Any]:
    try:
        value = load_json(path.read_bytes(), str(path)) if path.is_file() else {}
    except (OSError, InvalidInput):
        return {}
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def files(path: Path) -> list[Path]:
    """The conversations under ``path``: a file itself, a task's or a session's folder,
    or a folder of either (``tasks``, ``sessions``, or the data folder holding them)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InvalidInput(f"{path} does not exist")
    if (path / HISTORY).is_file():  # one task's folder
        return [path / HISTORY]
    if (path / f"{path.name}{MESSAGES}").is_file():  # one session's folder
        return [path / f"{path.name}{MESSAGES}"]
    found = [*path.glob(f"*/{HISTORY}"), *path.glob(f"tasks/*/{HISTORY}")]
    for folder in [*path.glob("*/"), *path.glob("sessions/*/")]:
        messages = folder / f"{folder.name}{MESSAGES}"
        if messages.is_file():
            found.append(messages)
    return sorted(set(found))


def _data_dir() -> Path:
    """Cline's data folder: ``CLINE_DATA_DIR``, else ``CLINE_DIR``/data, else
    ``~/.cline/data``."""
    explicit = os.environ.get("CLINE_DATA_DIR", "").strip()
    if explicit:
        return Path(explicit)
    root = os.environ.get("CLINE_DIR", "").strip()
    return Path(root) / "data" if root else home(".cline", "data")


def _defaults() -> list[Path]:
    """The extension's tasks in VS Code's globalStorage, and Cline's own tasks and
    sessions (``CLINE_SESSION_DATA_DIR`` names the latter elsewhere)."""
    if sys.platform == "darwin":
        code = home("Library", "Application Support", "Code", "User", "globalStorage")
    else:
        code = home(".config", "Code", "User", "globalStorage")
    sessions = os.environ.get("CLINE_SESSION_DATA_DIR", "").strip()
    return [code / EXTENSION / "tasks", _data_dir() / "tasks",
            Path(sessions) if sessions else _data_dir() / "sessions"]


SOURCE = Source(NAME, "cline", _defaults, files, parse)
