-- Authenticated (team) mode: users, API keys, workspace membership, and Row-Level
-- Security on every per-user table.
--
-- How RLS is keyed: when the daemon serves an authenticated request, each transaction
-- begins with
--     SELECT set_config('role', 'memd_app', true), set_config('memd.user_id', <user>, true)
-- i.e. SET LOCAL ROLE memd_app and a transaction-local setting naming the user. memd_app
-- is NOLOGIN and not the owner of any table, so the policies below bind it: it sees and
-- writes only rows whose user_id is that setting (plus, for reading, the memories of
-- workspaces it shares with their owner). Without the setting it sees nothing. Work that
-- spans users (the job queue, sweeps, key lookup, administration) runs as the owner.
--
-- Creating the role needs CREATEROLE. Where the connecting role lacks it, a DBA runs:
--     CREATE ROLE memd_app NOLOGIN; GRANT memd_app TO <memd's login role>;
-- and memd refuses to start in auth mode until the role exists and is granted.

CREATE TABLE users (
    user_id    text COLLATE "C" PRIMARY KEY,
    name       text NOT NULL DEFAULT '',
    created_at double precision NOT NULL
);

CREATE TABLE api_keys (
    key_id       text COLLATE "C" PRIMARY KEY,
    user_id      text COLLATE "C" NOT NULL REFERENCES users (user_id),
    key_hash     text COLLATE "C" NOT NULL UNIQUE,  -- SHA-256 hex; the key is never stored
    label        text NOT NULL DEFAULT '',
    created_at   double precision NOT NULL,
    last_used_at double precision,
    revoked_at   double precision
);
CREATE INDEX idx_api_keys_user ON api_keys (user_id);

CREATE TABLE workspace_members (
    workspace  text COLLATE "C" NOT NULL,
    user_id    text COLLATE "C" NOT NULL REFERENCES users (user_id),
    created_at double precision NOT NULL,
    PRIMARY KEY (workspace, user_id)
);
CREATE INDEX idx_workspace_members_user ON workspace_members (user_id);

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        CREATE ROLE memd_app NOLOGIN;
    END IF;
    IF NOT pg_has_role(current_user, 'memd_app', 'MEMBER') THEN
        EXECUTE format('GRANT memd_app TO %I', current_user);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'memd: cannot create or grant the role memd_app (%); auth mode needs a DBA '
                 'to run: CREATE ROLE memd_app NOLOGIN; GRANT memd_app TO %', SQLERRM, current_user;
END $$;

-- True when the acting user and ``owner`` are both members of ``ws``. SECURITY DEFINER:
-- it reads workspace_members as the owner, so the policies need no policy of their own
-- on that table to evaluate it.
CREATE FUNCTION memd_shares_workspace(ws text, owner text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT EXISTS (
        SELECT 1 FROM workspace_members me JOIN workspace_members them
            ON them.workspace = me.workspace
        WHERE me.workspace = ws AND me.user_id = current_setting('memd.user_id', true)
          AND them.user_id = owner)
$$;

-- Keyword search under RLS. The text-search match (@@) is not LEAKPROOF, so PostgreSQL
-- will not use it as an index condition below an RLS policy: a user's keyword search
-- would filter every row of the user instead of probing the GIN index. These two
-- functions run the indexed query as the owner, restricted to what the acting user may
-- read (the same rule as the policies), and return ids and ranks; the caller then reads
-- the rows themselves through RLS.
CREATE FUNCTION memd_keyword_memory_ids(
    target text, q tsquery, lim integer, active_only boolean, workspaces text[]
) RETURNS TABLE (memory_id text, memory_tier smallint, rank real)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT m.memory_id, m.memory_tier, ts_rank_cd(m.content_tsv, q)
    FROM memories m
    WHERE m.user_id = target AND m.content_tsv @@ q
      AND (NOT active_only OR m.is_active)
      AND (workspaces IS NULL OR m.workspace = ANY (workspaces))
      AND (target = current_setting('memd.user_id', true)
           OR (m.workspace <> '' AND memd_shares_workspace(m.workspace, target)))
    ORDER BY 3 DESC, 1
    LIMIT lim
$$;

CREATE FUNCTION memd_keyword_message_ids(target text, q tsquery, lim integer, sess text)
RETURNS TABLE (message_id text, created_at double precision, rank real)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT h.message_id, h.created_at, ts_rank_cd(h.content_tsv, q)
    FROM messages h
    WHERE h.user_id = target AND target = current_setting('memd.user_id', true)
      AND h.content_tsv @@ q AND (sess IS NULL OR h.session_id = sess)
    ORDER BY 3 DESC, 1
    LIMIT lim
$$;

DO $$
DECLARE
    t text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;
    END IF;
    GRANT USAGE ON SCHEMA public TO memd_app;
    GRANT SELECT ON schema_migrations, schema_meta, memd_partitioning TO memd_app;
    -- Shared, content-addressed caches: no user column (a system prompt is found only by
    -- the hash of its own text).
    GRANT SELECT, INSERT, UPDATE ON system_prompts, embedding_cache TO memd_app;
    FOREACH t IN ARRAY ARRAY['sessions', 'messages', 'memories', 'facts', 'memory_entities',
                             'usage_log', 'calls', 'jobs'] LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO memd_app', t);
    END LOOP;
    GRANT SELECT ON users, api_keys, workspace_members TO memd_app;
    GRANT EXECUTE ON FUNCTION memd_shares_workspace(text, text),
        memd_keyword_memory_ids(text, tsquery, integer, boolean, text[]),
        memd_keyword_message_ids(text, tsquery, integer, text) TO memd_app;
END $$;

-- Row-Level Security. Policies apply to memd_app only; the owner (migrations, the job
-- queue, sweeps, administration) is not subject to them.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['sessions', 'messages', 'memories', 'facts', 'memory_entities',
                             'usage_log', 'calls', 'jobs', 'users', 'api_keys',
                             'workspace_members'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policies: RLS on with no policy denies everything but the owner
    END IF;
    FOREACH t IN ARRAY ARRAY['sessions', 'messages', 'memories', 'facts', 'memory_entities',
                             'usage_log', 'calls', 'jobs'] LOOP
        EXECUTE format(
            'CREATE POLICY memd_own_rows ON %I TO memd_app '
            'USING (user_id = current_setting(''memd.user_id'', true)) '
            'WITH CHECK (user_id = current_setting(''memd.user_id'', true))', t);
    END LOOP;
    -- A workspace's memories are readable (not writable) by its members.
    CREATE POLICY memd_workspace_read ON memories FOR SELECT TO memd_app
        USING (workspace <> '' AND memd_shares_workspace(workspace, user_id));
    -- ... and so are their entity links (the entity channel of retrieval)
    CREATE POLICY memd_workspace_read ON memory_entities FOR SELECT TO memd_app
        USING (EXISTS (SELECT 1 FROM memories m
                       WHERE m.user_id = memory_entities.user_id
                         AND m.memory_id = memory_entities.memory_id
                         AND m.workspace <> ''
                         AND memd_shares_workspace(m.workspace, m.user_id)));
    CREATE POLICY memd_own_user ON users FOR SELECT TO memd_app
        USING (user_id = current_setting('memd.user_id', true));
    CREATE POLICY memd_own_keys ON api_keys FOR SELECT TO memd_app
        USING (user_id = current_setting('memd.user_id', true));
    CREATE POLICY memd_member_rows ON workspace_members FOR SELECT TO memd_app
        USING (user_id = current_setting('memd.user_id', true)
               OR memd_shares_workspace(workspace, user_id));
END $$;
