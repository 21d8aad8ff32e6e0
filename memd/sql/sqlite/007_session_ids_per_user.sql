-- Session ids are per user, as on PostgreSQL: two users may pin the same session id
-- (X-Memd-Session) without one of them getting a conflict. SQLite cannot change a
-- primary key or a UNIQUE constraint in place, so both tables are rebuilt; messages keep
-- their rowids, which the contentless full-text index (messages_fts) refers to.
CREATE TABLE sessions_by_user (
    session_id              TEXT NOT NULL,
    user_id                 TEXT NOT NULL,
    workspace               TEXT NOT NULL DEFAULT '',
    created_at              REAL NOT NULL,
    updated_at              REAL NOT NULL,
    expires_at              REAL,
    status                  INTEGER NOT NULL DEFAULT 1,   -- 1 active 2 paused 3 closed 4 expired
    model_id                TEXT,
    context_window_size     INTEGER NOT NULL DEFAULT 8192,
    system_prompt_hash      TEXT REFERENCES system_prompts(prompt_hash),
    system_prompt_tokens    INTEGER NOT NULL DEFAULT 0,
    max_response_tokens     INTEGER NOT NULL DEFAULT 1024,
    turn_count              INTEGER NOT NULL DEFAULT 0,
    total_prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    total_completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_cost_microcents   INTEGER NOT NULL DEFAULT 0,
    summary_text            TEXT,
    summary_token_count     INTEGER NOT NULL DEFAULT 0,
    parent_session_id       TEXT,
    metadata                TEXT NOT NULL DEFAULT '{}',
    history_version         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, session_id)
);
INSERT INTO sessions_by_user (
    session_id, user_id, workspace, created_at, updated_at, expires_at, status, model_id,
    context_window_size, system_prompt_hash, system_prompt_tokens, max_response_tokens,
    turn_count, total_prompt_tokens, total_completion_tokens, total_cost_microcents,
    summary_text, summary_token_count, parent_session_id, metadata, history_version)
SELECT
    session_id, user_id, workspace, created_at, updated_at, expires_at, status, model_id,
    context_window_size, system_prompt_hash, system_prompt_tokens, max_response_tokens,
    turn_count, total_prompt_tokens, total_completion_tokens, total_cost_microcents,
    summary_text, summary_token_count, parent_session_id, metadata, history_version
FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_by_user RENAME TO sessions;
CREATE INDEX idx_sessions_user_active ON sessions (user_id, updated_at DESC) WHERE status = 1;
CREATE INDEX idx_sessions_user_all ON sessions (user_id, created_at DESC);
CREATE INDEX idx_sessions_expiry ON sessions (expires_at) WHERE status != 4;

CREATE TABLE messages_by_user (
    message_id            TEXT PRIMARY KEY,
    session_id            TEXT NOT NULL,
    user_id               TEXT NOT NULL,
    turn_index            INTEGER NOT NULL,
    role                  TEXT NOT NULL,
    content               TEXT,
    name                  TEXT,
    tool_calls            TEXT,                 -- JSON array, as the client sent it
    tool_call_id          TEXT,
    content_hash          TEXT,
    token_count           INTEGER NOT NULL,
    model_id              TEXT,
    finish_reason         TEXT,
    prompt_tokens         INTEGER,
    completion_tokens     INTEGER,
    latency_ms            INTEGER,
    created_at            REAL NOT NULL,
    is_compressed         INTEGER NOT NULL DEFAULT 0,
    compressed_summary_id TEXT,
    is_pruned             INTEGER NOT NULL DEFAULT 0,
    has_embedding         INTEGER NOT NULL DEFAULT 0,
    metadata              TEXT NOT NULL DEFAULT '{}',
    chain_hash            TEXT,
    UNIQUE (user_id, session_id, turn_index)
);
INSERT INTO messages_by_user (
    rowid, message_id, session_id, user_id, turn_index, role, content, name, tool_calls,
    tool_call_id, content_hash, token_count, model_id, finish_reason, prompt_tokens,
    completion_tokens, latency_ms, created_at, is_compressed, compressed_summary_id,
    is_pruned, has_embedding, metadata, chain_hash)
SELECT
    rowid, message_id, session_id, user_id, turn_index, role, content, name, tool_calls,
    tool_call_id, content_hash, token_count, model_id, finish_reason, prompt_tokens,
    completion_tokens, latency_ms, created_at, is_compressed, compressed_summary_id,
    is_pruned, has_embedding, metadata, chain_hash
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_by_user RENAME TO messages;
CREATE INDEX idx_messages_session_turn ON messages (user_id, session_id, turn_index DESC);
CREATE INDEX idx_messages_session_active ON messages (user_id, session_id, turn_index DESC)
    WHERE is_compressed = 0 AND is_pruned = 0;
CREATE INDEX idx_messages_needs_embedding ON messages (user_id, created_at)
    WHERE has_embedding = 0 AND content IS NOT NULL;
CREATE INDEX idx_messages_chain ON messages (user_id, chain_hash) WHERE chain_hash IS NOT NULL;
