-- The chat proxy: session inference and call records.
--
-- chain_hash: SHA-256 over the session's messages up to and including this one
-- (role, content, name, tool_calls, tool_call_id; system messages excluded), so a
-- client that resends its whole history is matched to the stored session by prefix.
ALTER TABLE messages ADD COLUMN chain_hash TEXT;
CREATE INDEX idx_messages_chain ON messages (user_id, chain_hash) WHERE chain_hash IS NOT NULL;

-- One row per proxied chat call: what was injected and why (the compiler's report).
CREATE TABLE calls (
    call_id     TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL,
    session_id  TEXT,
    workspace   TEXT NOT NULL DEFAULT '',
    model_id    TEXT,
    created_at  REAL NOT NULL,
    status      INTEGER,
    report      TEXT NOT NULL DEFAULT '{}',
    metadata    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_calls_user ON calls (user_id, created_at DESC);
