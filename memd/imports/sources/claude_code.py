"""Claude Code: ``~/.claude/projects/<project>/<session id>.jsonl``, one event a line.

A line's ``type`` is ``user`` or ``assistant`` for a message (others are summaries,
snapshots and bookkeeping); ``message`` holds an Anthropic message whose content is a
string or content blocks; ``cwd`` is the project folder, ``timestamp`` ISO 8601. One API
reply is written as several lines with the same ``message.id``, a block each; they make
one turn (a block written twice, as a resumed session rewrites the last reply, counts
once). A resumed session (``claude --resume``, ``--continue``) is a new file that first
repeats the lines of the one it resumed, the first of them still naming the old session:
the file is keyed by the session its first line names, so it continues that
conversation, and each turn keeps its line's ``uuid`` (:attr:`Turn.line`) for the write
path to skip what it stored already. A message the user typed while the agent worked,
taken in mid-turn, is an ``attachment`` line (``queued_command``), read as a user line
at its own time. Not the user's words, so not read as a user turn: lines of a subagent
(``isSidechain``), the client's meta lines (``isMeta``: caveats, command output) and its
summary of a compacted conversation (``isCompactSummary``), its note that the user
stopped a reply; ``tool_result`` blocks are tool turns. Command wrappers, the output of
local commands and of the user's ``!`` shell commands, the caveat older versions wrote
before them without ``isMeta``, and ``<system-reminder>`` blocks inside a user's text
are client text that extraction leaves out (:mod:`memd.engine.learning.templates`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.errors import InvalidInput
from memd.imports.base import Source, files_named, home
from memd.imports.model import (
    Conversation,
    Turn,
    block_text,
    epoch,
    tool_uses,
    workspace_for,
)

NAME = "claude-code"
# What Claude Code writes as a user's text block when the user stops a reply: a note of
# the client's, not words of the user's.
INTERRUPTED = frozenset({"[Request interrupted by user]",
                         "[Request interrupted by user for tool use]"})


def parse(data: bytes, name: str) -> list[Conversation]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name} is not UTF-8 text: {exc}") from None
    turns: list[Turn] = []
    reply_id: str | None = None
    reply_blocks: set[str] = set()  # the content blocks of that reply read so far
    cwd: str | None = None
    sessions: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(text.splitlines()):
                break  # a line being written while we read: the next import has it
            raise InvalidInput(f"{name}, line {number}: not JSON ({exc})") from None
        if not isinstance(event, Mapping):
            continue
        queued = _queued_prompt(event)
        if queued is not None:  # the user's words, read as a user line's
            if turns and turns[-1].role == "user" and turns[-1].text == block_text(queued):
                continue  # also written as the user line before it
            event = {**event, "type": "user", "message": {"role": "user", "content": queued}}
        if event.get("type") not in ("user", "assistant"):
            continue
        message = event.get("message")
        if (not isinstance(message, Mapping) or event.get("isSidechain")
                or event.get("isMeta") or event.get("isCompactSummary")):
            continue
        cwd = cwd or _str(event.get("cwd"))
        sid = _str(event.get("sessionId"))
        if sid is not None and sid not in sessions:
            sessions.append(sid)
        at = epoch(event.get("timestamp"))
        line_id = _str(event.get("uuid"))
        if event["type"] == "assistant":
            mid = _str(message.get("id"))
            content = message.get("content")
            blocks = content if isinstance(content, list) else [
                {"type": "text", "text": content}] if isinstance(content, str) else []
            if mid is not None and mid == reply_id and turns and turns[-1].role == "assistant":
                # a block of the reply written again (a resumed session rewrites it)
                # is the same block, not more of the reply
                new = [b for b in blocks if _block_key(b) not in reply_blocks]
                turn = _assistant(new, at)
                last = turns[-1]
                turns[-1] = Turn("assistant", "\n".join(t for t in (last.text, turn.text) if t),
                                 last.at, last.tool_calls + turn.tool_calls, line=last.line)
            else:
                turns.append(_assistant(blocks, at, line_id))
                reply_blocks = set()
            reply_blocks.update(_block_key(b) for b in blocks)
            reply_id = mid
        else:
            reply_id = None
            turns.extend(_user(message.get("content"), at, line_id))
    if not turns:
        return []
    # The file is named after its session. A resumed session's file starts with the
    # lines of the one it resumed, the first of them still naming that session: keyed by
    # it, the file continues the conversation it resumed (memd.imports.write stores
    # only what follows the last line already stored).
    # Its own lines name the file's own session: the part of the conversation it holds.
    key = sessions[0] if sessions else Path(name).stem
    return [Conversation(NAME, key, tuple(turns), client="claude-code",
                         workspace=workspace_for(cwd), meta={"cwd": cwd},
                         part=sessions[-1] if sessions else None)]


def _queued_prompt(event: Mapping[str, Any]) -> str | list[Any] | None:
    """What the user typed while the agent worked, when ``event`` records it: an
    ``attachment`` line of ``type: queued_command`` whose ``commandMode`` is ``prompt``
    (absent in older versions) and whose origin, when it has one, is ``human``. Its
    prompt is text, or content blocks when it carried an image. None for any other line,
    and for the client's own notices queued the same way (``task-notification``)."""
    attachment = event.get("attachment")
    if (event.get("type") != "attachment" or not isinstance(attachment, Mapping)
            or attachment.get("type") != "queued_command"):
        return None
    origin = attachment.get("origin")
    kind = origin.get("kind") if isinstance(origin, Mapping) else None
    if attachment.get("commandMode", "prompt") != "prompt" or kind not in (None, "human"):
        return None
    prompt = attachment.get("prompt")
    return prompt if isinstance(prompt, str | list) else None


def _user(content: Any, at: float | None, line: str | None) -> list[Turn]:
    """A user line: its tool results as tool turns, its text as a user turn."""
    if isinstance(content, str):
        return [] if content.strip() in INTERRUPTED else [Turn("user", content, at,
                                                                line=line)]
    turns = []
    blocks = content if isinstance(content, list) else []
    for block in blocks:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            turns.append(Turn("tool", block_text(block.get("content")), at,
                              tool_call_id=_str(block.get("tool_use_id")), line=line))
    text = block_text([b for b in blocks if not (isinstance(b, Mapping)
                                                  and str(b.get("text", "")).strip()
                                                  in INTERRUPTED)])
    if text:
        turns.append(Turn("user", text, at, line=line))
    return turns


def _assistant(content: Any, at: float | None, line: str | None = None) -> Turn:
    return Turn("assistant", block_text(content), at, tool_uses(content), line=line)


def _block_key(block: Any) -> str:
    return json.dumps(block, sort_keys=True, ensure_ascii=False)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


SOURCE = Source(NAME, "claude-code", lambda: [home(".claude", "projects")],
                files_named("*/*.jsonl", "*.jsonl", "projects/*/*.jsonl"), parse)
