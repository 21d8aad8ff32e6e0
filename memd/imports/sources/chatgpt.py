"""ChatGPT's data export: ``conversations.json``, a list of conversations.

Each conversation's ``mapping`` is a tree of nodes (``id``, ``parent``, ``children``,
``message``): every edit or regeneration is a branch. The conversation as the user last
saw it is the path from ``current_node`` up through ``parent`` links, read root first.
Not turns: messages of role ``system``, hidden ones (``is_visually_hidden_from_conversation``),
the user's custom instructions (``is_user_system_message``, content
``user_editable_context``), non-text content (images, code sent to a tool, browsing
state), and an assistant message addressed to a tool (``recipient`` other than ``all``:
a call, such as the text it saves to its own memory) or on a channel other than the
final answer's (``analysis``: its reasoning). A ``tool`` message is a tool's output. In a
voice conversation the words are ``audio_transcription`` parts of a ``multimodal_text``
message, beside pointers to the audio: the words are the turn. Real exports also hold
empty messages (the hidden system message at the root, an assistant's placeholder
before its answer) and branch at the first message when it was edited; neither is a
turn. The export has no project folders: no workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.imports.base import Source, files_named
from memd.imports.model import Conversation, Turn, epoch, expect, load_json

NAME = "chatgpt"
_ROLES = {"user": "user", "assistant": "assistant", "tool": "tool"}


def parse(data: bytes, name: str) -> list[Conversation]:
    raw = load_json(data, name)
    expect(isinstance(raw, list), name, "a ChatGPT export (a list of conversations)")
    out = []
    for conv in raw:
        expect(isinstance(conv, Mapping) and isinstance(conv.get("mapping"), Mapping),
               name, "a ChatGPT export (a conversation without a mapping)")
        key = conv.get("conversation_id") or conv.get("id")
        expect(isinstance(key, str) and bool(key), name,
               "a ChatGPT export (a conversation without an id)")
        turns = tuple(t for t in (_turn(n) for n in _branch(conv)) if t is not None)
        if turns:
            out.append(Conversation(NAME, key, turns, client="chatgpt",
                                    title=conv.get("title") or None,
                                    created_at=epoch(conv.get("create_time"))))
    return out


def _branch(conv: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The nodes from the root to ``current_node`` (the visible branch)."""
    mapping = conv["mapping"]
    node_id = conv.get("current_node")
    if node_id not in mapping:  # no current node named: the newest leaf
        leaves = [n for n in mapping.values() if isinstance(n, Mapping) and not n.get("children")]
        node_id = leaves[-1].get("id") if leaves else None
    path: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, Mapping):
            break
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def _turn(node: Mapping[str, Any]) -> Turn | None:
    message = node.get("message")
    if not isinstance(message, Mapping):
        return None
    author = message.get("author")
    if not isinstance(author, Mapping):
        return None
    role = _ROLES.get(str(author.get("role", "")))
    meta = message.get("metadata")
    if role is None or (isinstance(meta, Mapping)
                        and (meta.get("is_visually_hidden_from_conversation")
                             or meta.get("is_user_system_message"))):
        return None
    if role == "assistant" and (message.get("recipient", "all") != "all"
                                or message.get("channel") not in (None, "final")):
        return None
    content = message.get("content")
    if not isinstance(content, Mapping):
        return None
    parts = content.get("parts")
    if content.get("content_type") not in ("text", "multimodal_text") \
            or not isinstance(parts, list):
        return None
    text = "\n".join(t for t in (_part_text(p) for p in parts) if t).strip()
    if not text:
        return None
    at = epoch(message.get("create_time"))
    if role == "tool":
        return Turn("tool", text, at, tool_call_id=str(author.get("name") or "tool"))
    return Turn(role, text, at)


def _part_text(part: Any) -> str:
    """The text of one part of a message's content: a string, or what was said in a
    voice conversation (an ``audio_transcription`` part); "" for an image, an audio or
    video pointer, or anything else without words."""
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping) and part.get("content_type") == "audio_transcription":
        text = part.get("text")
        return text if isinstance(text, str) else ""
    return ""


def _defaults() -> list[Path]:
    return [Path.cwd() / "conversations.json"]


SOURCE = Source(NAME, "chatgpt", _defaults, files_named("conversations.json"), parse)
