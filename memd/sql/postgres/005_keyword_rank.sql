-- Keyword relevance by ts_rank (term frequency) instead of ts_rank_cd (cover density):
-- for the OR of a query's words that memd searches with, cover density adds little and
-- costs several times as much per matching row, the largest part of a compile's keyword
-- channel. The backend's own queries changed with this file;
-- these are the row-level-security paths' functions of 003_auth.sql, the same but for
-- the ranking function.

CREATE OR REPLACE FUNCTION memd_keyword_memory_ids(
    target text, q tsquery, lim integer, active_only boolean, workspaces text[]
) RETURNS TABLE (memory_id text, memory_tier smallint, rank real)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT m.memory_id, m.memory_tier, ts_rank(m.content_tsv, q)
    FROM memories m
    WHERE m.user_id = target AND m.content_tsv @@ q
      AND (NOT active_only OR m.is_active)
      AND (workspaces IS NULL OR m.workspace = ANY (workspaces))
      AND (target = current_setting('memd.user_id', true)
           OR (m.workspace <> '' AND memd_shares_workspace(m.workspace, target)))
    ORDER BY 3 DESC, 1
    LIMIT lim
$$;

CREATE OR REPLACE FUNCTION memd_keyword_message_ids(target text, q tsquery, lim integer,
                                                    sess text)
RETURNS TABLE (message_id text, created_at double precision, rank real)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT h.message_id, h.created_at, ts_rank(h.content_tsv, q)
    FROM messages h
    WHERE h.user_id = target AND target = current_setting('memd.user_id', true)
      AND h.content_tsv @@ q AND (sess IS NULL OR h.session_id = sess)
    ORDER BY 3 DESC, 1
    LIMIT lim
$$;
