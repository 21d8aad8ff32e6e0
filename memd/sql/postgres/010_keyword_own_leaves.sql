-- The keyword channel of an authenticated request over its own user's partitions (the
-- memory candidates' statement, which since 009 reads those leaves directly): the GIN
-- probe of the two leaves the statement names, instead of memd_keyword_memory_ids over
-- the parents. The @@ match is not LEAKPROOF, so under row-level security PostgreSQL
-- would scan a user's leaf row by row; this function runs the indexed query as the owner,
-- for the acting user's rows only, as memd_keyword_memory_ids does. That function plans
-- its query over the parents at every call (pruning 2 x 256 leaves at the production
-- layout). Here the dynamic query names the two leaves, and is planned in a fraction of
-- that time.
--
-- The leaves must be partitions of memories_working and memories_durable (checked in the
-- catalog), and the rows are the acting user's (memd.user_id), whatever a caller passes.
CREATE FUNCTION memd_keyword_own_memory_ids(
    target text, working text, durable text, q tsquery, lim integer, active_only boolean,
    workspaces text[]
) RETURNS TABLE (memory_id text, memory_tier smallint, rank real)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF target IS DISTINCT FROM current_setting('memd.user_id', true) THEN
        RAISE EXCEPTION 'memd_keyword_own_memory_ids reads the acting user''s memories only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (SELECT count(*) FROM pg_inherits i
        WHERE (i.inhrelid = to_regclass(quote_ident(working))
               AND i.inhparent = 'memories_working'::regclass)
           OR (i.inhrelid = to_regclass(quote_ident(durable))
               AND i.inhparent = 'memories_durable'::regclass)) <> 2 THEN
        RAISE EXCEPTION 'not partitions of memories_working and memories_durable: %, %',
            working, durable USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT m.memory_id, m.memory_tier, ts_rank(m.content_tsv, $1) FROM ('
        'SELECT memory_id, memory_tier, content_tsv, is_active, workspace FROM %I '
        'WHERE user_id = $2 AND content_tsv @@ $1 UNION ALL '
        'SELECT memory_id, memory_tier, content_tsv, is_active, workspace FROM %I '
        'WHERE user_id = $2 AND content_tsv @@ $1) AS m '
        'WHERE (NOT $3 OR m.is_active) AND ($4 IS NULL OR m.workspace = ANY ($4)) '
        'ORDER BY 3 DESC, 1 LIMIT $5', working, durable)
    USING q, target, active_only, workspaces, lim;
END $$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        GRANT EXECUTE ON FUNCTION
            memd_keyword_own_memory_ids(text, text, text, tsquery, integer, boolean, text[])
            TO memd_app;
    END IF;
END $$;
