-- An authenticated request reads its user's own memory partitions directly, as an
-- unauthenticated one does, instead of the partitioned parents: a statement that names a
-- few leaves is prepared once and runs its generic plan, where one over the parents is
-- planned at every call, a large share of the memory candidates' time. Row-Level Security binds the leaves too: each
-- leaf of memories_working, memories_durable, memory_stats and memory_entities gets RLS,
-- a policy that lets memd_app read its acting user's own rows and nothing else, and
-- SELECT for memd_app (no writes: they keep going through the parents). Reads of other
-- users' rows (a workspace's shared memories) keep going through the parents' policies.
--
-- The keyword channel's function reads the parents; a caller may run it under
-- force_generic_plan (the generic plan of a statement over own leaves), and a generic plan
-- over a parent locks every partition, so the function keeps custom plans for itself.

CREATE FUNCTION memd_guard_leaf(leaf text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', leaf);
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- RLS on, no policy, no grant: only the owner reads it
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                   AND tablename = leaf AND policyname = 'memd_own_rows') THEN
        EXECUTE format('CREATE POLICY memd_own_rows ON %I FOR SELECT TO memd_app '
                       'USING (user_id = current_setting(''memd.user_id'', true))', leaf);
    END IF;
    EXECUTE format('GRANT SELECT ON %I TO memd_app', leaf);
END $$;

-- The parents whose hash partitions are read directly (memd_add_partitions guards the
-- leaves it makes from now on).
CREATE TABLE memd_guarded_parents (parent text PRIMARY KEY);
INSERT INTO memd_guarded_parents VALUES
    ('memories_working'), ('memories_durable'), ('memory_stats'), ('memory_entities');

DO $$
DECLARE
    leaf text;
BEGIN
    FOR leaf IN SELECT c.relname FROM pg_inherits i
                JOIN pg_class c ON c.oid = i.inhrelid
                JOIN pg_class p ON p.oid = i.inhparent
                WHERE p.relname IN (SELECT parent FROM memd_guarded_parents) LOOP
        PERFORM memd_guard_leaf(leaf);
    END LOOP;
END $$;

-- 001_core.sql's function, guarding the leaves of memd_guarded_parents it makes.
CREATE OR REPLACE FUNCTION memd_add_partitions(batch integer) RETURNS integer
LANGUAGE plpgsql AS $$
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
            IF EXISTS (SELECT 1 FROM memd_guarded_parents WHERE parent = t.parent) THEN
                PERFORM memd_guard_leaf(leaf);
            END IF;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

ALTER FUNCTION memd_keyword_memory_ids(text, tsquery, integer, boolean, text[])
    SET plan_cache_mode = force_custom_plan;
