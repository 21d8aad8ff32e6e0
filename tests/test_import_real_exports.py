"""The ChatGPT and Claude.ai importers on the shape of real exports, beyond the
documented one the other import tests write: excerpts of public export files (the
texts rewritten, the structure kept; docs/design.md, "Real export shapes")."""

from __future__ import annotations

import json
from typing import Any

from memd.imports.sources import chatgpt, claude_ai

ROOT = "00000000-0000-4000-8000-000000000000"  # claude.ai's parent of a first message


def gpt_node(nid: str, parent: str | None, children: list[str], role: str | None = None,
             parts: list[Any] | None = None, at: float | None = None,
             **message: Any) -> dict[str, Any]:
    """A node of a ChatGPT export's mapping, with the fields real exports carry."""
    body = None if role is None else {
        "id": nid, "author": {"role": role, "name": None, "metadata": {}},
        "create_time": at, "update_time": None,
        "content": {"content_type": message.pop("content_type", "text"),
                    "parts": parts if parts is not None else [""]},
        "status": "finished_successfully", "end_turn": None, "weight": 1.0,
        "metadata": message.pop("metadata", {}), "recipient": "all", "channel": None,
        **message}
    return {"id": nid, "message": body, "parent": parent, "children": children}


def chatgpt_export() -> bytes:
    """A voice conversation whose first message was edited: the hidden system message
    branches to both versions, an empty placeholder precedes each answer, and the
    assistant reasons on the analysis channel before its final one."""
    nodes = [
        gpt_node("client-created-root", None, ["sys"]),
        gpt_node("sys", "client-created-root", ["u-old", "u-new"], "system", [""],
                 weight=0.0, metadata={"is_visually_hidden_from_conversation": True}),
        gpt_node("u-old", "sys", ["a-old"], "user", ["Which bricks fit a 2x4 plate?"], 100.0),
        gpt_node("a-old", "u-old", [], "assistant", ["Any 2x4 brick."], 101.0),
        gpt_node("u-new", "sys", ["a-wait"], "user", [
            {"content_type": "audio_transcription", "text": "I'm building the blue castle set.",
             "direction": "in", "decoding_id": None},
            {"content_type": "real_time_user_audio_video_asset_pointer",
             "frames_asset_pointers": [], "expiry_datetime": "2026-06-23T16:54:25+00:00"},
        ], 200.0, content_type="multimodal_text"),
        gpt_node("a-wait", "u-new", ["a-think"], "assistant", [""], 201.0),
        gpt_node("a-think", "a-wait", ["a-final"], "assistant",
                 ["The user wants steps for a castle."], 202.0, channel="analysis"),
        gpt_node("a-final", "a-think", [], "assistant", [
            {"content_type": "audio_transcription", "text": "Start with the gate.",
             "direction": "out", "decoding_id": None},
        ], 203.0, content_type="multimodal_text", channel="final"),
    ]
    conv = {"title": "Castle set help", "create_time": 99.5, "update_time": 203.5,
            "mapping": {n["id"]: n for n in nodes}, "moderation_results": [],
            "current_node": "a-final", "plugin_ids": None,
            "conversation_id": "684e65c7-c770-8007-9684-3f62b6f51677",
            "conversation_template_id": None, "gizmo_id": None, "is_archived": False,
            "safe_urls": [], "default_model_slug": "gpt-4o", "memory_scope": "global_enabled",
            "id": "684e65c7-c770-8007-9684-3f62b6f51677"}
    return json.dumps([conv]).encode()


def test_chatgpt_real_shape_reads_the_visible_branch_and_spoken_words() -> None:
    (conv,) = chatgpt.parse(chatgpt_export(), "conversations.json")
    assert [(t.role, t.text, t.at) for t in conv.turns] == [
        ("user", "I'm building the blue castle set.", 200.0),
        ("assistant", "Start with the gate.", 203.0)]
    assert (conv.key, conv.title, conv.created_at) == (
        "684e65c7-c770-8007-9684-3f62b6f51677", "Castle set help", 99.5)


def claude_message(uuid: str, parent: str, sender: str, text: str, at: str,
                   **extra: Any) -> dict[str, Any]:
    blocks = extra.pop("blocks", [{"type": "text", "text": text}])
    return {"uuid": uuid, "text": text, "content": blocks, "sender": sender,
            "created_at": at, "updated_at": at, "attachments": [], "files": [],
            "parent_message_uuid": parent, **extra}


def claude_export(leaf: str | None = None) -> bytes:
    """A conversation whose first message was edited and whose answer was retried:
    every version in one flat list, each naming the message it answers."""
    messages = [
        claude_message("h1", ROOT, "human", "My cat is called Miso.", "2025-11-17T05:34:19Z"),
        claude_message("a1", "h1", "assistant", "Nice name!", "2025-11-17T05:34:21Z"),
        claude_message("h1b", ROOT, "human", "My cat is called Tofu.", "2025-11-17T05:40:00Z",
                       files=[{"file_name": "tofu.jpg"}],
                       attachments=[{"file_name": "notes.txt", "file_type": "txt",
                                     "file_size": 12, "extracted_content": "vet on Monday"}]),
        claude_message("a1b", "h1b", "assistant", "Tofu is a fine name.",
                       "2025-11-17T05:40:02Z"),
        claude_message("a1c", "h1b", "assistant", "Tofu suits a cat.", "2025-11-17T05:41:00Z",
                       blocks=[{"type": "thinking", "thinking": "a short reply"},
                               {"type": "text", "text": "Tofu suits a cat."}]),
    ]
    conv: dict[str, Any] = {"uuid": "c0ffee00-1111-4222-8333-444455556666", "name": "Cat",
                            "summary": "", "created_at": "2025-11-17T05:34:19Z",
                            "updated_at": "2025-11-17T05:41:00Z",
                            "account": {"uuid": "acct"}, "chat_messages": messages}
    if leaf is not None:
        conv["current_leaf_message_uuid"] = leaf
    return json.dumps([conv]).encode()


def test_claude_ai_real_shape_reads_the_newest_branch_only() -> None:
    (conv,) = claude_ai.parse(claude_export(), "conversations.json")
    assert [t.role for t in conv.turns] == ["user", "assistant"]
    user, answer = conv.turns
    assert user.text.startswith("My cat is called Tofu.")
    assert '<file name="notes.txt">\nvet on Monday\n</file>' in user.text
    assert answer.text == "Tofu suits a cat."
    assert "Miso" not in json.dumps([t.text for t in conv.turns])


def test_claude_ai_current_leaf_names_the_branch_when_given() -> None:
    (conv,) = claude_ai.parse(claude_export(leaf="a1"), "conversations.json")
    assert [t.text for t in conv.turns] == ["My cat is called Miso.", "Nice name!"]


def test_claude_ai_messages_without_parents_are_read_in_order() -> None:
    raw = json.loads(claude_export())
    for m in raw[0]["chat_messages"]:
        del m["parent_message_uuid"]
    (conv,) = claude_ai.parse(json.dumps(raw).encode(), "conversations.json")
    assert len(conv.turns) == 5
