-- Access statistics in a narrow table of their own (docs/design.md, "Access statistics").
--
-- Every compile that uses memories bumps their access stats (a background job). As
-- columns of memories, each bump would be a new version of a wide row: access_count is
-- indexed, so the update cannot be HOT, and every bump would insert the row again into
-- the HNSW, full-text, trigram and b-tree indexes, costing database time and bloating
-- the indexes every later query reads. Here a bump is an update of a 5-column row with
-- two b-tree indexes, and memories rows change only when their content does.
--
-- The backend makes a memory's stats row with it (one transaction) and deletes it with
-- it; a memory without one (rows loaded by other means) reads as never accessed.
-- memory_rows is what the backend reads memories from: memories with their stats, under
-- the caller's Row-Level Security (security_invoker). The frequent channel instead joins
-- from memory_stats, so that idx_memory_stats_access gives it the top rows in order.

CREATE TABLE memory_stats (
    user_id               text COLLATE "C" NOT NULL,
    memory_id             text COLLATE "C" NOT NULL,
    access_count          integer NOT NULL DEFAULT 0,
    last_accessed_at      double precision,
    relevance_accumulator double precision NOT NULL DEFAULT 0.0,
    PRIMARY KEY (user_id, memory_id)
) PARTITION BY HASH (user_id);
-- The frequent channel of retrieval: a user's most accessed memories, in index order.
CREATE INDEX idx_memory_stats_access ON memory_stats (user_id, access_count DESC, memory_id);

INSERT INTO memd_partitioning (parent, modulus, unlogged)
    SELECT 'memory_stats', modulus, false FROM memd_partitioning
    WHERE parent = 'memories_durable';

-- A database that already holds memories: make the partitions now (the start-up's batches
-- would come too late for the copy) and carry the stats over.
DO $$
DECLARE
    n integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM memories LIMIT 1) THEN
        RETURN;
    END IF;
    SELECT modulus INTO n FROM memd_partitioning WHERE parent = 'memory_stats';
    FOR i IN 0 .. n - 1 LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS %I PARTITION OF memory_stats '
            'FOR VALUES WITH (MODULUS %s, REMAINDER %s)',
            'memory_stats_p' || lpad(i::text, 3, '0'), n, i);
    END LOOP;
    INSERT INTO memory_stats (user_id, memory_id, access_count, last_accessed_at,
                              relevance_accumulator)
        SELECT user_id, memory_id, access_count, last_accessed_at, relevance_accumulator
        FROM memories;
END $$;

DROP INDEX idx_memories_user_access;
ALTER TABLE memories DROP COLUMN access_count, DROP COLUMN last_accessed_at,
    DROP COLUMN relevance_accumulator;

CREATE VIEW memory_rows WITH (security_invoker = true) AS
    SELECT m.*, coalesce(s.access_count, 0) AS access_count, s.last_accessed_at,
           coalesce(s.relevance_accumulator, 0) AS relevance_accumulator
    FROM memories m
    LEFT JOIN memory_stats s ON s.user_id = m.user_id AND s.memory_id = m.memory_id;

-- Row-Level Security as on memories: own rows; a workspace's memories' stats are readable
-- by its members.
ALTER TABLE memory_stats ENABLE ROW LEVEL SECURITY;

-- True when ``owner``'s memory ``mid`` is in a workspace the acting user shares with the
-- owner (SECURITY DEFINER, as memd_shares_workspace, so it reads memories as the owner).
CREATE FUNCTION memd_shared_memory(owner text, mid text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT EXISTS (
        SELECT 1 FROM memories m
        WHERE m.user_id = owner AND m.memory_id = mid AND m.workspace <> ''
          AND memd_shares_workspace(m.workspace, owner))
$$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;
    END IF;
    GRANT SELECT, INSERT, UPDATE, DELETE ON memory_stats TO memd_app;
    GRANT SELECT ON memory_rows TO memd_app;
    GRANT EXECUTE ON FUNCTION memd_shared_memory(text, text) TO memd_app;
    CREATE POLICY memd_own_rows ON memory_stats TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
    -- Through a function: an EXISTS over memories here would put a scan of every
    -- memories partition into the plan of each query that reads stats (the policy's
    -- subquery cannot be pruned); the function runs only for rows of other users.
    CREATE POLICY memd_workspace_read ON memory_stats FOR SELECT TO memd_app
        USING (memd_shared_memory(user_id, memory_id));
END $$;

