"""Aider: ``.aider.chat.history.md`` in each project folder (the folder is the workspace).

A session starts at a ``# aider chat started at YYYY-MM-DD HH:MM:SS`` line (local time).
Lines starting ``#### `` are what the user typed (consecutive ones are one message; aider
ends each with two spaces, a Markdown line break, and writes ``<blank>`` for an empty
input); lines starting ``> `` are aider's own output (files added, edits applied,
commits, questions and the answers to them, the output of commands): the client's text,
not a turn. The rest is the model's reply. A message that is an aider command (``/add``,
``/run``, ...) is the client's, not words to learn from, except the question or request
of ``/ask``, ``/code``, ``/architect`` and ``/context``, kept without the command. The
file keeps no time per message: turns get the session's start.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from memd.errors import InvalidInput
from memd.imports.base import Source, files_named
from memd.imports.model import Conversation, Turn, workspace_for

NAME = "aider"
HISTORY = ".aider.chat.history.md"
_START = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
# The commands whose argument is a request to the model in the user's words.
_ASKING = re.compile(r"^/(?:ask|code|architect|context)\s+(?=\S)")


def parse(data: bytes, name: str) -> list[Conversation]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name} is not UTF-8 text: {exc}") from None
    folder = Path(name).parent
    workspace = workspace_for(str(folder)) if str(folder) not in ("", ".") else None
    out: list[Conversation] = []
    started: str | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), None]:
        head = _START.match(line) if line is not None else None
        if line is None or head:
            if started is not None:
                turns = _turns(lines, _local_epoch(started))
                if turns:
                    out.append(Conversation(NAME, f"{folder}#{started}", turns,
                                            client="aider", workspace=workspace,
                                            created_at=_local_epoch(started)))
            started, lines = (head.group(1) if head else None), []
        else:
            lines.append(line)
    return out


def _turns(lines: list[str], at: float) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    role, chunk = "", list[str]()  # the message being read

    def close() -> None:
        text = "\n".join(chunk).strip()
        if role == "user":
            text = _ASKING.sub("", text)
            if text.startswith("/") or text == "<blank>":
                text = ""
        if text:
            turns.append(Turn(role, text, at))
        chunk.clear()

    for line in lines:
        if line.startswith("#### ") or line == "####":
            if role != "user":
                close()
                role = "user"
            chunk.append(line[5:].rstrip())
        elif line.startswith(">"):
            close()  # the client's output ends a message
            role = ""
        else:
            if role != "assistant" and line.strip():
                close()
                role = "assistant"
            chunk.append(line)
    close()
    return tuple(turns)


def _local_epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()


def _defaults() -> list[Path]:
    return [Path.cwd() / HISTORY]


SOURCE = Source(NAME, "aider", _defaults, files_named(HISTORY, f"*/{HISTORY}"), parse)
