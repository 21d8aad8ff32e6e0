"""What memd's MCP tools and resources do, for one user, over the engine.

An MCP client (Claude Code, Claude Desktop, Cursor, Cline, opencode...) calls memory tools
explicitly instead of routing its chats through the proxy. The tools are the engine's
public operations, the ones the native HTTP API calls, and answer with the same JSON
shapes (:mod:`memd.engine.shapes`), so a memory looks the same whichever way it is read.
:mod:`memd.server.mcp_server` turns these methods into MCP tools and resources, both for
the daemon's ``/mcp`` route and for ``memd mcp`` when no daemon runs.

The proxy's rules hold here too. What ``add_memory`` stores goes through the engine's
write path: its secrets become placeholders, a duplicate bumps the memory it repeats, a
conflicting statement supersedes the old one. Its provenance is the user's (the agent
writes on the user's behalf), and its metadata says so: ``source: "mcp"``,
``written_by: "agent"``. ``forget_memory`` is ``memd forget``: the memory goes with every
derived copy, a tombstone keeps the same words from becoming a memory again, and the
messages it came from are pruned, so neither search, recall nor a later chat's memory
block brings it back.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from memd.engine import validate as v
from memd.engine.block.inject import build
from memd.engine.memory import Memd
from memd.engine.shapes import (
    fact_json,
    memory_json,
    message_json,
    pruned_json,
    session_json,
    write_json,
)
from memd.errors import InvalidInput

#: The metadata of a memory an MCP client adds: who wrote it, and through which door.
AGENT_WRITTEN = {"source": "mcp", "written_by": "agent"}
#: How many memories one ``list_memories`` page holds.
PAGE = 50
#: The workspace segment of ``memory://facts/{workspace}`` that means every workspace.
ALL_WORKSPACES = "_"
#: The most tokens a ``context`` preview may ask for.
MAX_CONTEXT_TOKENS = 32_000


def encode_cursor(offset: int) -> str:
    """An opaque page cursor (MCP's pagination convention), here the next offset."""
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode("ascii")


def decode_cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        kind, _, value = base64.urlsafe_b64decode(cursor.encode("ascii")).decode().partition(":")
        offset = int(value)
    except (binascii.Error, UnicodeError, ValueError):
        raise InvalidInput("cursor is not one list_memories returned") from None
    if kind != "o" or not 0 <= offset <= 2**31:
        raise InvalidInput("cursor is not one list_memories returned")
    return offset


@dataclass(frozen=True)
class MemoryTools:
    """The tools of one MCP request, acting as ``user_id`` on ``engine``. Blocking: the
    server runs them in a worker thread."""

    engine: Memd
    user_id: str

    def search_memory(self, query: str, k: int = 10,
                      workspace: str | None = None) -> dict[str, Any]:
        hits = self.engine.search(query, self.user_id, k=k, workspace=workspace or None)
        return {"hits": [h.to_dict() for h in hits]}

    def add_memory(self, text: str, workspace: str | None = None) -> dict[str, Any]:
        result = self.engine.add(text, self.user_id, workspace=workspace or None,
                                 metadata=AGENT_WRITTEN)
        return write_json(result)

    def list_memories(self, workspace: str | None = None,
                      cursor: str | None = None) -> dict[str, Any]:
        offset = decode_cursor(cursor)
        found = self.engine.list(self.user_id, workspace=workspace or None,
                                 limit=PAGE + 1, offset=offset)
        out: dict[str, Any] = {"memories": [memory_json(m) for m in found[:PAGE]]}
        out["next_cursor"] = encode_cursor(offset + PAGE) if len(found) > PAGE else None
        return out

    def forget_memory(self, id: str) -> dict[str, Any]:
        gone = self.engine.forget_with_sources(id, self.user_id)
        return {"deleted": id, "pruned": pruned_json(gone.pruned)}

    def list_facts(self, workspace: str | None = None) -> dict[str, Any]:
        found = self.engine.facts(self.user_id, workspace=workspace or None)
        return {"facts": [fact_json(f) for f in found]}

    def recall_conversation(self, query: str | None = None, session_id: str | None = None,
                            k: int = 10) -> dict[str, Any]:
        """Past messages: those matching ``query`` across sessions, or one session's, in
        order. Pruned messages (a forget's sources) are never recalled."""
        if (query is None) == (session_id is None):
            raise InvalidInput("give either query (search past messages) or session_id "
                               "(one session's messages), not both or neither")
        if query is not None:
            hits = self.engine.search(query, self.user_id, k=k, kinds=["message"])
            return {"messages": [h.to_dict() for h in hits]}
        assert session_id is not None
        found = self.engine.messages(session_id, self.user_id)
        return {"session_id": session_id,
                "messages": [message_json(m) for m in found if not m.is_pruned]}

    def context(self, query: str, max_tokens: int = 1000,
                workspace: str | None = None) -> dict[str, Any]:
        """The memory block memd would add to a user message saying ``query``, within
        ``max_tokens``: the same candidates and packing as a proxied chat's block."""
        if not 1 <= max_tokens <= MAX_CONTEXT_TOKENS:
            raise InvalidInput(f"max_tokens must be between 1 and {MAX_CONTEXT_TOKENS}")
        text = v.normalize_text(query, self.engine.settings.max_text_chars, "query")
        # past messages too, as a chat's block recalls them (none sent in this "chat")
        recall: list[str] | None = [] if self.engine.settings.memory_recall else None
        facts, mems = self.engine.memory_candidates(self.user_id, text,
                                                    workspace=workspace or None,
                                                    sent_chains=recall)
        block = build(facts, mems, max_tokens, "user", None,
                      share=self.engine.settings.instruction_share)
        if block is None:
            return {"block": "", "tokens": 0, "items": []}
        return {"block": block.text, "tokens": block.tokens,
                "items": [{"kind": c.kind, "id": c.id, "text": c.text}
                          for c in (*block.facts, *block.memories)]}

    def get_call(self, id: str) -> dict[str, Any]:
        return self.engine.call(self.user_id, id)

    def facts_resource(self, workspace: str) -> dict[str, Any]:
        """``memory://facts/{workspace}``: ``_`` names no workspace (all the facts)."""
        return self.list_facts(None if workspace == ALL_WORKSPACES else workspace)

    def session(self, session_id: str) -> dict[str, Any]:
        """A session with its messages (pruned ones left out), for the resource."""
        found = self.engine.session(session_id, self.user_id)
        messages = self.engine.messages(session_id, self.user_id)
        return {**session_json(found),
                "messages": [message_json(m) for m in messages if not m.is_pruned]}
