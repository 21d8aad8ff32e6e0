"""Claude.ai's data export: ``conversations.json``, a list of conversations.

Each has a ``uuid``, a ``name`` and ``chat_messages`` in order, each with ``sender``
(``human`` or ``assistant``), ``created_at``, its ``text`` or ``content`` blocks, and the
files the user attached (``attachments`` with their ``extracted_content``). An
attachment is the file's text, not the user's words: it is kept with the message inside
a ``<file>`` tag, which extraction leaves out (:mod:`memd.engine.learning.templates`). The export
has no project folders: no workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.imports.base import Source, files_named
from memd.imports.model import Conversation, Turn, block_text, epoch, expect, load_json

NAME = "claude-ai"
_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def parse(data: bytes, name: str) -> list[Conversation]:
    raw = load_json(data, name)
    expect(isinstance(raw, list), name, "a Claude.ai export (a list of conversations)")
    out = []
    for conv in raw:
        expect(isinstance(conv, Mapping) and isinstance(conv.get("uuid"), str)
               and isinstance(conv.get("chat_messages"), list), name,
               "a Claude.ai export (a conversation without uuid or chat_messages)")
        turns = tuple(t for t in (_turn(m) for m in conv["chat_messages"]) if t is not None)
        if turns:
            out.append(Conversation(NAME, conv["uuid"], turns, client="claude-ai",
                                    title=conv.get("name") or None,
                                    created_at=epoch(conv.get("created_at"))))
    return out


def _turn(message: Any) -> Turn | None:
    if not isinstance(message, Mapping):
        return None
    role = _ROLES.get(str(message.get("sender")))
    if role is None:
        return None
    text = block_text(message.get("content")) or str(message.get("text") or "")
    files = [a for a in message.get("attachments") or [] if isinstance(a, Mapping)
             and a.get("extracted_content")]
    attached = "\n".join(f'<file name="{a.get("file_name", "")}">\n'
                         f'{a["extracted_content"]}\n</file>' for a in files)
    text = "\n".join(t for t in (text.strip(), attached) if t)
    return Turn(role, text, epoch(message.get("created_at"))) if text else None


def _defaults() -> list[Path]:
    return [Path.cwd() / "conversations.json"]


SOURCE = Source(NAME, "claude-ai", _defaults, files_named("conversations.json"), parse)
