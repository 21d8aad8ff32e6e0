"""Cline: a folder per task under the extension's ``tasks`` folder (VS Code's
globalStorage on Linux and macOS, or ``~/.cline/data/tasks``), named by the task's
start time in milliseconds, holding ``api_conversation_history.json`` (the Anthropic
messages sent to the model, in order) and ``task_metadata.json`` (files and models).

Cline writes its own text into user messages: the ``<environment_details>`` block of
every turn (whose ``# Current Working Directory (...)`` line names the workspace), tool
results (``tool_result`` blocks, or text opening ``[tool for 'x'] Result:``), resumption
notices; extraction leaves all of it out (:mod:`memd.engine.learning.templates`). A message may
carry its time as ``ts`` (milliseconds); otherwise the task's start time is used.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path

from memd.errors import InvalidInput
from memd.imports.base import Source, home
from memd.imports.model import (
    Conversation,
    Turn,
    block_text,
    epoch,
    expect,
    load_json,
    tool_uses,
    workspace_for,
)

NAME = "cline"
HISTORY = "api_conversation_history.json"
EXTENSION = "saoudrizwan.claude-dev"
_CWD = re.compile(r"# Current Working Directory \((.+?)\) Files")


def parse(data: bytes, name: str) -> list[Conversation]:
    raw = load_json(data, name)
    expect(isinstance(raw, list), name, "a Cline conversation history (a list of messages)")
    task = Path(name).parent.name
    start = epoch(int(task)) if task.isdigit() else None
    turns: list[Turn] = []
    cwd: str | None = None
    for message in raw:
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
                    turns.append(Turn("tool", block_text(b.get("content")), at,
                                      tool_call_id=str(b.get("tool_use_id", ""))))
            turns.append(Turn("user", text, at))
    if not turns:
        return []
    return [Conversation(NAME, task or Path(name).stem, tuple(turns), client="cline",
                         workspace=workspace_for(cwd), created_at=start)]


def files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InvalidInput(f"{path} does not exist")
    if (path / HISTORY).is_file():  # one task's folder
        return [path / HISTORY]
    return sorted(path.glob(f"*/{HISTORY}")) or sorted(path.glob(f"tasks/*/{HISTORY}"))


def _defaults() -> list[Path]:
    if sys.platform == "darwin":
        code = home("Library", "Application Support", "Code", "User", "globalStorage")
    else:
        code = home(".config", "Code", "User", "globalStorage")
    return [code / EXTENSION / "tasks", home(".cline", "data", "tasks")]


SOURCE = Source(NAME, "cline", _defaults, files, parse)
