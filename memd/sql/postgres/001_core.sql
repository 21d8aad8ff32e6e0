-- memd team schema (PostgreSQL 15+ with pgvector >= 0.8 and pg_trgm): the same logical
-- tables as sql/sqlite/, PostgreSQL-native (docs/design.md, "Storage").
--
-- * Timestamps are double precision seconds since the epoch (UTC): exactly the floats of
--   memd/types.py, so both backends store and return the same values
--   (to_timestamp(created_at) shows one as a timestamptz).
-- * JSON is JSONB, word lists (tags, entities) are text[], and "no workspace" is stored as
--   '' as on SQLite, so that unique keys hold.
-- * Ids, user ids, workspaces, hashes and fact keys use the "C" collation: compared and
--   ordered bytewise, as on SQLite, whatever the database's locale.
-- * Every per-user table is PARTITION BY HASH (user_id) with user_id leading its primary
--   key and every hot index, so a query that names one user touches one partition (and a
--   Citus cluster can distribute on user_id). Partition counts are placeholders filled in
--   by the migration runner (backends/postgres.py) and recorded in schema_meta:
--   {sessions_partitions} (sessions, usage_log), {memory_partitions} (memories, facts,
--   memory_entities), {history_partitions} (messages). Production: 256, 256, 512; tests: 4.
--   A DBA applying this file with psql substitutes them first (sed 's/{dim}/384/g' ...).
-- * The partitions themselves are not made here: thousands of tables (each with its
--   indexes) in one transaction would exhaust the lock table (max_locks_per_transaction).
--   This file records the layout in memd_partitioning; the store then runs
--   memd_add_partitions(n) and memd_ensure_history_months(...) in short transactions until
--   they return 0 (psql: CALL memd_create_partitions();). A partition made after its
--   parent's indexes gets all of them.
-- * Messages are further range-partitioned by month of created_at (old months can be
--   detached or archived whole); see
--   memd_ensure_history_months below. Working memory (tier 0) lives in UNLOGGED leaves.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- The partition layout: each table here is PARTITION BY HASH (user_id) into ``modulus``
-- partitions <parent>_p000 ..; ``sub`` partitions each of them again (e.g. 'RANGE
-- (created_at)') with a DEFAULT partition <parent>_pNNN_default.
CREATE TABLE memd_partitioning (
    parent    text PRIMARY KEY,
    modulus   integer NOT NULL CHECK (modulus BETWEEN 1 AND 1000),
    unlogged  boolean NOT NULL DEFAULT false,
    sub       text
);

-- Make up to ``batch`` missing hash partitions of the layout; returns how many it made
-- (0: the layout is complete). Call it in separate transactions until it returns 0.
CREATE FUNCTION memd_add_partitions(batch integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    t record;
    leaf text;
    made integer := 0;
BEGIN
    FOR t IN SELECT * FROM memd_partitioning ORDER BY parent LOOP
        FOR i IN 0 .. t.modulus - 1 LOOP
            leaf := t.parent || '_p' || lpad(i::text, 3, '0');
            CONTINUE WHEN to_regclass(quote_ident(leaf)) IS NOT NULL;
            IF made >= batch THEN
                RETURN made;
            END IF;
            EXECUTE format(
                'CREATE %s TABLE %I PARTITION OF %I FOR VALUES WITH (MODULUS %s, REMAINDER %s) %s',
                CASE WHEN t.unlogged THEN 'UNLOGGED' ELSE '' END, leaf, t.parent, t.modulus, i,
                CASE WHEN t.sub IS NULL THEN '' ELSE 'PARTITION BY ' || t.sub END);
            IF t.sub IS NOT NULL THEN
                EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', leaf || '_default', leaf);
            END IF;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

CREATE TABLE system_prompts (
    prompt_hash   text COLLATE "C" PRIMARY KEY,          -- SHA-256 hex of the prompt text
    text          text NOT NULL,
    token_count   integer NOT NULL,
    created_at    double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);

CREATE TABLE sessions (
    session_id              text COLLATE "C" NOT NULL,
    user_id                 text COLLATE "C" NOT NULL,
    workspace               text COLLATE "C" NOT NULL DEFAULT '',
    created_at              double precision NOT NULL,
    updated_at              double precision NOT NULL,
    expires_at              double precision,
    status                  smallint NOT NULL DEFAULT 1,  -- 1 active 2 paused 3 closed 4 expired
    model_id                text,
    context_window_size     integer NOT NULL DEFAULT 8192,
    system_prompt_hash      text COLLATE "C" REFERENCES system_prompts (prompt_hash),
    system_prompt_tokens    integer NOT NULL DEFAULT 0,
    max_response_tokens     integer NOT NULL DEFAULT 1024,
    turn_count              integer NOT NULL DEFAULT 0,
    total_prompt_tokens     bigint NOT NULL DEFAULT 0,
    total_completion_tokens bigint NOT NULL DEFAULT 0,
    total_cost_microcents   bigint NOT NULL DEFAULT 0,
    summary_text            text,
    summary_token_count     integer NOT NULL DEFAULT 0,
    parent_session_id       text COLLATE "C",
    metadata                jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (user_id, session_id)
) PARTITION BY HASH (user_id);
INSERT INTO memd_partitioning VALUES ('sessions', {sessions_partitions});
CREATE INDEX idx_sessions_user_active ON sessions (user_id, updated_at DESC) WHERE status = 1;
CREATE INDEX idx_sessions_user_all ON sessions (user_id, created_at DESC);
CREATE INDEX idx_sessions_expiry ON sessions (expires_at) WHERE status <> 4;

-- The conversation history: append-only; the only updates are compaction marks
-- and embedding backfill. Hash by user, then range by month of created_at: the primary key
-- must hold every partition column, so turn_index uniqueness per session is kept by
-- construction (append_messages locks the session row) rather than by an index.
CREATE TABLE messages (
    message_id            text COLLATE "C" NOT NULL,
    session_id            text COLLATE "C" NOT NULL,
    user_id               text COLLATE "C" NOT NULL,
    turn_index            integer NOT NULL,
    role                  text NOT NULL,
    content               text,
    name                  text,
    tool_calls            jsonb,                         -- as the client sent it
    tool_call_id          text,
    content_hash          text COLLATE "C",
    token_count           integer NOT NULL,
    model_id              text,
    finish_reason         text,
    prompt_tokens         integer,
    completion_tokens     integer,
    latency_ms            integer,
    created_at            double precision NOT NULL,
    is_compressed         boolean NOT NULL DEFAULT false,
    compressed_summary_id text COLLATE "C",
    is_pruned             boolean NOT NULL DEFAULT false,
    metadata              jsonb NOT NULL DEFAULT '{}',
    -- SHA-256 over the session's messages up to this one (see sql/sqlite/003_proxy.sql)
    chain_hash            text COLLATE "C",
    content_tsv           tsvector
        GENERATED ALWAYS AS (to_tsvector('english', coalesce(content, ''))) STORED,
    PRIMARY KEY (user_id, message_id, created_at)
) PARTITION BY HASH (user_id);
INSERT INTO memd_partitioning VALUES
    ('messages', {history_partitions}, false, 'RANGE (created_at)');
CREATE INDEX idx_messages_session_turn ON messages (user_id, session_id, turn_index DESC);
CREATE INDEX idx_messages_session_active ON messages (user_id, session_id, turn_index DESC)
    WHERE NOT is_compressed AND NOT is_pruned;
CREATE INDEX idx_messages_compaction ON messages (user_id, session_id, created_at)
    WHERE NOT is_compressed;
CREATE INDEX idx_messages_chain ON messages (user_id, chain_hash) WHERE chain_hash IS NOT NULL;
CREATE INDEX idx_messages_fts ON messages USING gin (content_tsv);

-- Monthly partitions of every hash partition of messages, for the ``months`` months from
-- the one holding ``from_ts`` (epoch seconds, UTC): messages_p007_202611 holds November
-- 2026 of hash partition 7. Rows outside every month land in <leaf>_default; a month that
-- already has rows there is left to the default partition (creating it would fail).
-- Makes at most ``batch`` partitions and returns how many it made: call it in separate
-- transactions until it returns 0. The store does at start and from its session sweep.
CREATE FUNCTION memd_ensure_history_months(
    from_ts double precision, months integer, batch integer
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    leaf record;
    first_month date := date_trunc('month', to_timestamp(from_ts) AT TIME ZONE 'UTC')::date;
    m_start date;
    lo double precision;
    hi double precision;
    part_name text;
    busy boolean;
    made integer := 0;
BEGIN
    FOR leaf IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'messages'::regclass ORDER BY c.relname
    LOOP
        FOR k IN 0 .. months - 1 LOOP
            m_start := (first_month + make_interval(months => k))::date;
            part_name := leaf.relname || '_' || to_char(m_start, 'YYYYMM');
            CONTINUE WHEN to_regclass(quote_ident(part_name)) IS NOT NULL;
            IF made >= batch THEN
                RETURN made;
            END IF;
            lo := extract(epoch FROM m_start::timestamp AT TIME ZONE 'UTC');
            hi := extract(epoch FROM (m_start + interval '1 month')::timestamp AT TIME ZONE 'UTC');
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE created_at >= $1 '
                           'AND created_at < $2)', leaf.relname || '_default')
                INTO busy USING lo, hi;
            CONTINUE WHEN busy;
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
                           part_name, leaf.relname, lo, hi);
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

-- For psql: the whole layout and this month's history partitions and the next two's, in
-- transactions of ``batch`` partitions (CALL it outside a transaction block).
CREATE PROCEDURE memd_create_partitions(batch integer DEFAULT 16) LANGUAGE plpgsql AS $$
BEGIN
    WHILE memd_add_partitions(batch) > 0 LOOP
        COMMIT;
    END LOOP;
    COMMIT;
    WHILE memd_ensure_history_months(extract(epoch FROM now()), 3, batch) > 0 LOOP
        COMMIT;
    END LOOP;
END $$;

-- Long-term memories. Tier 0 (working memory) goes to memories_working, whose
-- leaves are UNLOGGED: no WAL, emptied by crash recovery, which working memory may be.
-- Tiers 1-4 go to memories_durable. Both are hash-partitioned by user with the same
-- counts, so one user's memories sit in memories_working_pNNN and memories_durable_pNNN.
-- The primary key must carry memory_tier (a partition column); a tier change moves the row.
CREATE TABLE memories (
    memory_id             text COLLATE "C" NOT NULL,
    user_id               text COLLATE "C" NOT NULL,
    workspace             text COLLATE "C" NOT NULL DEFAULT '',
    session_id            text COLLATE "C",
    memory_tier           smallint NOT NULL CHECK (memory_tier BETWEEN 0 AND 4),
    memory_scope          smallint NOT NULL CHECK (memory_scope IN (0, 1)),
    content_text          text NOT NULL,
    content_hash          text COLLATE "C" NOT NULL,
    provenance_type       smallint NOT NULL,
    provenance_message_id text COLLATE "C",
    confidence            double precision NOT NULL DEFAULT 0.5,
    importance            double precision NOT NULL DEFAULT 0.5,
    relevance_accumulator double precision NOT NULL DEFAULT 0.0,
    access_count          integer NOT NULL DEFAULT 0,
    last_accessed_at      double precision,
    created_at            double precision NOT NULL,
    updated_at            double precision NOT NULL,
    expires_at            double precision,
    is_active             boolean NOT NULL DEFAULT true,
    is_validated          boolean NOT NULL DEFAULT false,
    token_count           integer NOT NULL,
    superseded_by         text COLLATE "C",
    tags                  text[] NOT NULL DEFAULT '{}',
    entities              text[] NOT NULL DEFAULT '{}',  -- denormalized copy of memory_entities
    metadata              jsonb NOT NULL DEFAULT '{}',
    content_tsv           tsvector
        GENERATED ALWAYS AS (to_tsvector('english', content_text)) STORED,
    PRIMARY KEY (user_id, memory_id, memory_tier)
) PARTITION BY LIST (memory_tier);
CREATE TABLE memories_working PARTITION OF memories FOR VALUES IN (0)
    PARTITION BY HASH (user_id);
CREATE TABLE memories_durable PARTITION OF memories FOR VALUES IN (1, 2, 3, 4)
    PARTITION BY HASH (user_id);
INSERT INTO memd_partitioning VALUES ('memories_working', {memory_partitions}, true),
    ('memories_durable', {memory_partitions}, false);
CREATE INDEX idx_memories_user_tier ON memories (user_id, memory_tier, is_active)
    WHERE is_active;
CREATE INDEX idx_memories_user_scope ON memories (user_id, memory_scope, memory_tier)
    WHERE is_active;
CREATE INDEX idx_memories_content_hash ON memories (user_id, content_hash);
CREATE INDEX idx_memories_user_access ON memories (user_id, access_count DESC) WHERE is_active;
CREATE INDEX idx_memories_user_created ON memories (user_id, created_at DESC);
CREATE INDEX idx_memories_expiry ON memories (expires_at)
    WHERE expires_at IS NOT NULL AND is_active;
CREATE INDEX idx_memories_superseded ON memories (superseded_by)
    WHERE superseded_by IS NOT NULL;
CREATE INDEX idx_memories_tags ON memories USING gin (tags) WHERE is_active;
CREATE INDEX idx_memories_fts ON memories USING gin (content_tsv);
-- Trigram index for partial and fuzzy recall (word_similarity, ILIKE) over memory text.
CREATE INDEX idx_memories_trgm ON memories USING gin (content_text gin_trgm_ops);

-- Structured facts: one active value per user+workspace+category+key.
CREATE TABLE facts (
    fact_id           text COLLATE "C" NOT NULL,
    user_id           text COLLATE "C" NOT NULL,
    workspace         text COLLATE "C" NOT NULL DEFAULT '',
    category          text COLLATE "C" NOT NULL,
    key               text COLLATE "C" NOT NULL,
    value             text NOT NULL,
    confidence        double precision NOT NULL DEFAULT 1.0,
    importance        double precision NOT NULL DEFAULT 0.8,
    is_active         boolean NOT NULL DEFAULT true,
    superseded_by     text COLLATE "C",
    source_message_id text COLLATE "C",
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL,
    metadata          jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (user_id, fact_id)
) PARTITION BY HASH (user_id);
INSERT INTO memd_partitioning VALUES ('facts', {memory_partitions});
CREATE UNIQUE INDEX idx_facts_one_active ON facts (user_id, workspace, category, key)
    WHERE is_active;
CREATE INDEX idx_facts_user ON facts (user_id, is_active, importance DESC);

-- Entities linked to memories (the entity channel of retrieval).
CREATE TABLE memory_entities (
    user_id   text COLLATE "C" NOT NULL,
    entity    text COLLATE "C" NOT NULL,
    memory_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (user_id, entity, memory_id)
) PARTITION BY HASH (user_id);
INSERT INTO memd_partitioning VALUES ('memory_entities', {memory_partitions});
CREATE INDEX idx_memory_entities_memory ON memory_entities (user_id, memory_id);

-- Usage and cost, one row per upstream call.
CREATE TABLE usage_log (
    usage_id          text COLLATE "C" NOT NULL,
    user_id           text COLLATE "C" NOT NULL,
    session_id        text COLLATE "C",
    workspace         text COLLATE "C" NOT NULL DEFAULT '',
    model_id          text,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    cost_microcents   bigint NOT NULL DEFAULT 0,
    latency_ms        integer,
    created_at        double precision NOT NULL,
    metadata          jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (user_id, usage_id)
) PARTITION BY HASH (user_id);
INSERT INTO memd_partitioning VALUES ('usage_log', {sessions_partitions});
CREATE INDEX idx_usage_user ON usage_log (user_id, created_at DESC);

-- One row per proxied chat call: what was injected and why (the compiler's report).
-- Not partitioned: finish_call() knows only the call id.
CREATE TABLE calls (
    call_id     text COLLATE "C" PRIMARY KEY,
    user_id     text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C",
    workspace   text COLLATE "C" NOT NULL DEFAULT '',
    model_id    text,
    created_at  double precision NOT NULL,
    status      integer,
    report      jsonb NOT NULL DEFAULT '{}',
    metadata    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_calls_user ON calls (user_id, created_at DESC);

-- Durable job queue: embedding backfill, extraction, summaries, sweeps. Workers claim with
-- FOR UPDATE SKIP LOCKED, so several daemons can share one database.
CREATE TABLE jobs (
    job_id       text COLLATE "C" PRIMARY KEY,
    kind         text NOT NULL,
    user_id      text COLLATE "C",
    payload      jsonb NOT NULL DEFAULT '{}',
    status       text NOT NULL DEFAULT 'pending',   -- pending | dead
    attempts     integer NOT NULL DEFAULT 0,
    run_after    double precision NOT NULL,
    lease_until  double precision,
    last_error   text,
    created_at   double precision NOT NULL
);
CREATE INDEX idx_jobs_due ON jobs (run_after, created_at) WHERE status = 'pending';

-- Embedding cache keyed by content hash: a text is never embedded twice.
CREATE TABLE embedding_cache (
    model        text COLLATE "C" NOT NULL,
    content_hash text COLLATE "C" NOT NULL,
    vector       bytea NOT NULL,
    PRIMARY KEY (model, content_hash)
);
CREATE INDEX idx_embedding_cache_hash ON embedding_cache (content_hash);
