-- The keyword channel of an authenticated request over its own user's partitions, with
-- the whole memory filter applied inside the probe: memd_keyword_own_memory_ids (010)
-- applies only is_active and the workspaces, so its caller over-fetched (4k + 20 ids) and
-- read every one of them back through the policies before its LIMIT k: for a query
-- matching hundreds of memories, most of the team-mode candidates statement's extra time
-- over the unauthenticated one. This function returns
-- the top ``lim`` ids that pass the filter the caller's statement applies (the same
-- columns and rules as PostgresStore._where), so the caller reads back only those.
--
-- Every filter argument is a value (NULL: no filter of that kind), never SQL text. As in
-- 010: the rows are the acting user's (memd.user_id), whatever a caller passes, and the
-- leaves must be partitions of memories_working and memories_durable.
CREATE FUNCTION memd_keyword_own_memory_top(
    target text, working text, durable text, q tsquery, lim integer, active_only boolean,
    workspaces text[], with_superseded boolean, live_at double precision, tiers smallint[],
    scope smallint, session text, all_tags text[]
) RETURNS TABLE (memory_id text, memory_tier smallint, rank real)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF target IS DISTINCT FROM current_setting('memd.user_id', true) THEN
        RAISE EXCEPTION 'memd_keyword_own_memory_top reads the acting user''s memories only'
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
        'SELECT memory_id, memory_tier, memory_scope, session_id, workspace, content_tsv, '
        'is_active, superseded_by, expires_at, tags FROM %I '
        'WHERE user_id = $2 AND content_tsv @@ $1 UNION ALL '
        'SELECT memory_id, memory_tier, memory_scope, session_id, workspace, content_tsv, '
        'is_active, superseded_by, expires_at, tags FROM %I '
        'WHERE user_id = $2 AND content_tsv @@ $1) AS m '
        'WHERE (NOT $3 OR m.is_active) AND ($4 IS NULL OR m.workspace = ANY ($4)) '
        'AND ($6 OR m.superseded_by IS NULL) '
        'AND ($7 IS NULL OR m.expires_at IS NULL OR m.expires_at > $7) '
        'AND ($8 IS NULL OR m.memory_tier = ANY ($8)) '
        'AND ($9 IS NULL OR m.memory_scope = $9) '
        'AND ($10 IS NULL OR m.memory_scope = 1 OR m.session_id = $10) '
        'AND ($11 IS NULL OR m.tags @> $11) '
        'ORDER BY 3 DESC, 1 LIMIT $5', working, durable)
    USING q, target, active_only, workspaces, lim, with_superseded, live_at, tiers, scope,
          session, all_tags;
END $$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        GRANT EXECUTE ON FUNCTION memd_keyword_own_memory_top(
            text, text, text, tsquery, integer, boolean, text[], boolean, double precision,
            smallint[], smallint, text, text[]
        ) TO memd_app;
    END IF;
END $$;
