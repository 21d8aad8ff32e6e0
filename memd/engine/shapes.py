"""The JSON shapes of memd's records and results, one for every interface.

The HTTP API, the CLI's ``--json`` output and the MCP tools print the same objects the
same way: a field renamed here is renamed everywhere at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memd.engine.learning.forget import ForgetPreview
from memd.engine.learning.write import FactResult, WriteResult
from memd.engine.validate import excerpt
from memd.types import Fact, Memory, Message, QueuedJob, Session


def memory_json(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id, "user_id": m.user_id, "workspace": m.workspace,
        "session_id": m.session_id, "text": m.text, "tier": int(m.tier),
        "scope": m.scope.name.lower(), "provenance": m.provenance.name.lower(),
        "confidence": m.confidence, "importance": m.importance,
        "access_count": m.access_count, "last_accessed_at": m.last_accessed_at,
        "created_at": m.created_at, "updated_at": m.updated_at, "expires_at": m.expires_at,
        "is_active": m.is_active, "superseded_by": m.superseded_by, "tags": list(m.tags),
        "entities": list(m.entities), "metadata": m.metadata, "token_count": m.token_count,
        "kind": m.kind,
    }


def session_json(x: Session) -> dict[str, Any]:
    return {
        "id": x.id, "user_id": x.user_id, "workspace": x.workspace,
        "status": x.status.name.lower(), "model": x.model,
        "context_window": x.context_window, "max_response_tokens": x.max_response_tokens,
        "system_prompt_hash": x.system_prompt_hash,
        "system_prompt_tokens": x.system_prompt_tokens, "turn_count": x.turn_count,
        "total_prompt_tokens": x.total_prompt_tokens,
        "total_completion_tokens": x.total_completion_tokens,
        "summary_text": x.summary_text, "parent_session_id": x.parent_session_id,
        "metadata": x.metadata, "created_at": x.created_at, "updated_at": x.updated_at,
        "expires_at": x.expires_at, "title": x.title,
    }


def message_json(m: Message) -> dict[str, Any]:
    return {
        "id": m.id, "session_id": m.session_id, "turn_index": m.turn_index, "role": m.role,
        "content": m.content, "name": m.name, "tool_calls": m.tool_calls,
        "tool_call_id": m.tool_call_id, "metadata": m.metadata,
        "token_count": m.token_count, "created_at": m.created_at,
        # the copy with its secrets replaced (null: it had none), and where compaction
        # or a forget left it: a compressed message's summary is the memory named here
        "sanitized": m.sanitized, "is_compressed": m.is_compressed,
        "compressed_summary_id": m.compressed_summary_id, "is_pruned": m.is_pruned,
    }


def fact_json(f: Fact) -> dict[str, Any]:
    return {
        "id": f.id, "user_id": f.user_id, "workspace": f.workspace, "category": f.category,
        "key": f.key, "value": f.value, "confidence": f.confidence,
        "importance": f.importance, "is_active": f.is_active,
        "superseded_by": f.superseded_by, "source_message_id": f.source_message_id,
        "metadata": f.metadata, "created_at": f.created_at, "updated_at": f.updated_at,
    }


def write_json(r: WriteResult) -> dict[str, Any]:
    return {"action": r.action, "memory": memory_json(r.memory),
            "replaced": [m.id for m in r.replaced]}


def fact_result_json(r: FactResult) -> dict[str, Any]:
    return {"action": r.action, "fact": fact_json(r.fact),
            "previous": None if r.previous is None else fact_json(r.previous)}


def pruned_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages a forget pruned, as the owner names them to erase them."""
    return [{"session_id": m.session_id, "message_id": m.id, "role": m.role}
            for m in messages]


def forget_preview_json(p: ForgetPreview) -> dict[str, Any]:
    """What a forget would remove: each pruned message with the start of its text, so
    that the user recognises it."""
    return {"memories": [memory_json(m) for m in p.memories],
            "facts": [fact_json(f) for f in p.facts],
            "pruned": [{"session_id": m.session_id, "message_id": m.id, "role": m.role,
                        "text": excerpt(m.safe_text or "", 200)} for m in p.pruned],
            "summaries": p.summaries,
            "titles": [{"session_id": sid, "title": title} for sid, title in p.titles]}


def job_json(q: QueuedJob) -> dict[str, Any]:
    j = q.job
    return {"id": j.id, "kind": j.kind, "user_id": j.user_id, "state": q.state,
            "attempts": j.attempts, "last_error": j.last_error, "created_at": j.created_at,
            "updated_at": q.updated_at, "run_after": j.run_after}
