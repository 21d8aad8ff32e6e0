"""The column lists of the tables both backends hold, in the order the row mappers of
:mod:`memd.backends.common.rows` read them."""

from __future__ import annotations

MEMORY_COLUMNS = (
    "memory_id, user_id, workspace, session_id, memory_tier, memory_scope, content_text, "
    "content_hash, provenance_type, provenance_message_id, confidence, importance, "
    "relevance_accumulator, access_count, last_accessed_at, created_at, updated_at, "
    "expires_at, is_active, is_validated, token_count, superseded_by, tags, entities, metadata"
)
MESSAGE_COLUMNS = (
    "message_id, session_id, user_id, turn_index, role, content, token_count, created_at, "
    "name, tool_calls, tool_call_id, content_hash, model_id, finish_reason, prompt_tokens, "
    "completion_tokens, latency_ms, is_compressed, compressed_summary_id, is_pruned, metadata, "
    "chain_hash, sanitized"
)
SESSION_COLUMNS = (
    "session_id, user_id, workspace, created_at, updated_at, expires_at, status, model_id, "
    "context_window_size, system_prompt_hash, system_prompt_tokens, max_response_tokens, "
    "turn_count, total_prompt_tokens, total_completion_tokens, total_cost_microcents, "
    "summary_text, summary_token_count, parent_session_id, metadata, history_version, title"
)
FACT_COLUMNS = (
    "fact_id, user_id, category, key, value, confidence, importance, created_at, updated_at, "
    "workspace, is_active, superseded_by, source_message_id, metadata"
)
JOB_COLUMNS = "job_id, kind, payload, user_id, attempts, run_after, created_at, last_error"
CALL_COLUMNS = "call_id, session_id, workspace, model_id, created_at, status, report, metadata"
USAGE_COLUMNS = (
    "usage_id, user_id, session_id, workspace, model_id, prompt_tokens, completion_tokens, "
    "cost_microcents, latency_ms, created_at, metadata"
)

# Memory fields update_memory takes, by the column each is stored in.
MEMORY_UPDATABLE = {
    "text": "content_text", "content_hash": "content_hash", "token_count": "token_count",
    "tier": "memory_tier", "scope": "memory_scope", "confidence": "confidence",
    "importance": "importance", "is_active": "is_active", "is_validated": "is_validated",
    "superseded_by": "superseded_by", "expires_at": "expires_at", "tags": "tags",
    "metadata": "metadata", "updated_at": "updated_at", "access_count": "access_count",
    "entities": "entities", "provenance": "provenance_type",
}
# Session columns update_session takes (the field names are the column names).
SESSION_UPDATABLE = frozenset({
    "status", "summary_text", "summary_token_count", "expires_at", "metadata", "updated_at",
    "model_id", "context_window_size", "max_response_tokens", "title",
})
MEMORY_ORDERS = ("created_at", "updated_at", "access_count", "importance")


def marks(mark: str, n: int) -> str:
    """``n`` placeholders for a VALUES list."""
    return ", ".join([mark] * n)
