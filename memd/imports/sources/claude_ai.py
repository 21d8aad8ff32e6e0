"""Claude.ai's data export: ``conversations.json``, a list of conversations.

Each has a ``uuid``, a ``name`` and ``chat_messages`` in order, each with ``sender``
(``human`` or ``assistant``), ``created_at``, its ``text`` or ``content`` blocks, and the
files the user attached (``attachments`` with their ``extracted_content``). An
attachment is the file's text, not the user's words: it is kept with the message inside
a ``<file>`` tag, which extraction leaves out (:mod:`memd.engine.learning.templates`). The export
has no project folders: no workspace.

Every edit and every retry stays in ``chat_messages``, one flat list in which each
message names the one it answers (``parent_message_uuid``): the conversation as it
reads is the path from the newest leaf back to the root (the bulk export names no
current leaf; the API's copy of a conversation does, ``current_leaf_message_uuid``),
and an abandoned branch is not imported. A message also carries ``files`` (images,
no text) beside ``attachments``, and ``content`` blocks of other types (``thinking``,
``tool_use``, ``tool_result``), none of them the user's or the answer's words.
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
        turns = tuple(t for t in (_turn(m) for m in _branch(conv)) if t is not None)
        if turns:
            out.append(Conversation(NAME, conv["uuid"], turns, client="claude-ai",
                                    title=conv.get("name") or None,
                                    created_at=epoch(conv.get("created_at"))))
    return out


def _branch(conv: Mapping[str, Any]) -> list[Any]:
    """The messages of the conversation as it reads: from its current leaf
    (``current_leaf_message_uuid``, else the newest message no other answers) up
    through ``parent_message_uuid`` to the root, read root first. Every message as it
    comes when they name no parents (an older export)."""
    messages = [m for m in conv["chat_messages"] if isinstance(m, Mapping)]
    by_id = {m["uuid"]: m for m in messages if isinstance(m.get("uuid"), str)}
    parents = {m.get("parent_message_uuid") for m in messages}
    if not (parents & by_id.keys()):  # no message answers another: one line
        return list(conv["chat_messages"])
    leaf = conv.get("current_leaf_message_uuid")
    if leaf not in by_id:
        leaves = [m for m in messages if m.get("uuid") not in parents]
        newest = max(leaves, key=lambda m: (epoch(m.get("created_at")) or 0.0),
                     default=None)
        leaf = newest.get("uuid") if newest is not None else None
    path: list[Any] = []
    while isinstance(leaf, str) and leaf in by_id and len(path) < len(by_id):
        path.append(by_id[leaf])
        leaf = by_id[leaf].get("parent_message_uuid")
    return path[::-1]


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
