-- memd embedded schema (SQLite): the tables of docs/design.md, "Storage", in one file per
-- data dir:
-- no partitioning (one process, one machine), timestamps as REAL unix seconds,
-- JSON as TEXT, the "no workspace" value stored as '' so that UNIQUE constraints hold.
-- Every table and every hot index leads with user_id, as on PostgreSQL.

CREATE TABLE system_prompts (
    prompt_hash   TEXT PRIMARY KEY,          -- SHA-256 hex of the prompt text
    text          TEXT NOT NULL,
    token_count   INTEGER NOT NULL,
    created_at    REAL NOT NULL DEFAULT (unixepoch('subsec'))
);

CREATE TABLE sessions (
    session_id              TEXT PRIMARY KEY,
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
    metadata                TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_sessions_user_active ON sessions (user_id, updated_at DESC) WHERE status = 1;
CREATE INDEX idx_sessions_user_all ON sessions (user_id, created_at DESC);
CREATE INDEX idx_sessions_expiry ON sessions (expires_at) WHERE status != 4;

-- Append-only: the only updates are compaction marks and embeddings.
CREATE TABLE messages (
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
    UNIQUE (session_id, turn_index)
);
CREATE INDEX idx_messages_session_turn ON messages (user_id, session_id, turn_index DESC);
CREATE INDEX idx_messages_session_active ON messages (user_id, session_id, turn_index DESC)
    WHERE is_compressed = 0 AND is_pruned = 0;
CREATE INDEX idx_messages_needs_embedding ON messages (user_id, created_at)
    WHERE has_embedding = 0 AND content IS NOT NULL;

CREATE TABLE memories (
    memory_id             TEXT PRIMARY KEY,
    user_id               TEXT NOT NULL,
    workspace             TEXT NOT NULL DEFAULT '',
    session_id            TEXT,
    memory_tier           INTEGER NOT NULL CHECK (memory_tier BETWEEN 0 AND 4),
    memory_scope          INTEGER NOT NULL CHECK (memory_scope IN (0, 1)),
    content_text          TEXT NOT NULL,
    content_hash          TEXT NOT NULL,
    provenance_type       INTEGER NOT NULL,
    provenance_message_id TEXT,
    confidence            REAL NOT NULL DEFAULT 0.5,
    importance            REAL NOT NULL DEFAULT 0.5,
    relevance_accumulator REAL NOT NULL DEFAULT 0.0,
    access_count          INTEGER NOT NULL DEFAULT 0,
    last_accessed_at      REAL,
    created_at            REAL NOT NULL,
    updated_at            REAL NOT NULL,
    expires_at            REAL,
    is_active             INTEGER NOT NULL DEFAULT 1,
    is_validated          INTEGER NOT NULL DEFAULT 0,
    token_count           INTEGER NOT NULL,
    superseded_by         TEXT,
    tags                  TEXT NOT NULL DEFAULT '[]',   -- JSON array
    entities              TEXT NOT NULL DEFAULT '[]',   -- JSON array (denormalized copy)
    metadata              TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_memories_user_tier ON memories (user_id, memory_tier, is_active)
    WHERE is_active = 1;
CREATE INDEX idx_memories_user_scope ON memories (user_id, memory_scope, memory_tier)
    WHERE is_active = 1;
CREATE INDEX idx_memories_content_hash ON memories (user_id, content_hash);
CREATE INDEX idx_memories_user_access ON memories (user_id, access_count DESC)
    WHERE is_active = 1;
CREATE INDEX idx_memories_user_created ON memories (user_id, created_at DESC);
CREATE INDEX idx_memories_expiry ON memories (expires_at)
    WHERE expires_at IS NOT NULL AND is_active = 1;
CREATE INDEX idx_memories_superseded ON memories (superseded_by)
    WHERE superseded_by IS NOT NULL;

-- Structured facts: one active value per user+workspace+category+key.
CREATE TABLE facts (
    fact_id           TEXT PRIMARY KEY,
    user_id           TEXT NOT NULL,
    workspace         TEXT NOT NULL DEFAULT '',
    category          TEXT NOT NULL,
    key               TEXT NOT NULL,
    value             TEXT NOT NULL,
    confidence        REAL NOT NULL DEFAULT 1.0,
    importance        REAL NOT NULL DEFAULT 0.8,
    is_active         INTEGER NOT NULL DEFAULT 1,
    superseded_by     TEXT,
    source_message_id TEXT,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    metadata          TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX idx_facts_one_active ON facts (user_id, workspace, category, key)
    WHERE is_active = 1;
CREATE INDEX idx_facts_user ON facts (user_id, is_active, importance DESC);

-- Entities linked to memories (the entity channel of retrieval).
CREATE TABLE memory_entities (
    user_id   TEXT NOT NULL,
    entity    TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    PRIMARY KEY (user_id, entity, memory_id)
) WITHOUT ROWID;
CREATE INDEX idx_memory_entities_memory ON memory_entities (memory_id);

-- Usage and cost, one row per upstream call.
CREATE TABLE usage_log (
    usage_id          TEXT PRIMARY KEY,
    user_id           TEXT NOT NULL,
    session_id        TEXT,
    workspace         TEXT NOT NULL DEFAULT '',
    model_id          TEXT,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_microcents   INTEGER NOT NULL DEFAULT 0,
    latency_ms        INTEGER,
    created_at        REAL NOT NULL,
    metadata          TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_usage_user ON usage_log (user_id, created_at DESC);

-- Durable job queue: embedding backfill, extraction, summaries, sweeps.
CREATE TABLE jobs (
    job_id       TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    user_id      TEXT,
    payload      TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL DEFAULT 'pending',   -- pending | dead
    attempts     INTEGER NOT NULL DEFAULT 0,
    run_after    REAL NOT NULL,
    lease_until  REAL,
    last_error   TEXT,
    created_at   REAL NOT NULL
);
CREATE INDEX idx_jobs_due ON jobs (status, run_after);

-- Embedding cache keyed by content hash: a text is never embedded twice.
CREATE TABLE embedding_cache (
    model        TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    vector       BLOB NOT NULL,
    PRIMARY KEY (model, content_hash)
) WITHOUT ROWID;

-- Full-text indexes (BM25; replaced by 005_fts_per_user.sql). ``owner`` holds one token per user ('u' + hex of the user
-- id), so a query ANDs the user's doclist instead of reading every match's row; the
-- rowid equals the memories/messages rowid.
CREATE VIRTUAL TABLE memories_fts USING fts5(
    content_text, owner, memory_id UNINDEXED,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, owner, session_id UNINDEXED, message_id UNINDEXED,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- Forgetting leaves no readable text in the full-text index either.
INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);
