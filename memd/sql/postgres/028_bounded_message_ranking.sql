-- A message keyword search over a long history ranks a bounded part of its matches
-- (memd.backends.postgres.messages: RANK_ALL and what follows it): ts_rank reads every
-- matching row, and in a history of 100,000 messages a common word matches tens of
-- thousands. The search counts each of its words' matches (up to a cap), then ranks by
-- the whole query the matches of its rarest words only. These are the row-level-security
-- paths of the two: the GIN probe runs here, on the acting user's rows only
-- (memd.user_id), whatever a caller passes as the target. The ranking takes the place of
-- memd_keyword_message_ids (003, 005), the same probe with one query for both matching
-- and ranking, which loses its last caller and goes; unlike it, this one leaves pruned
-- messages out before its LIMIT, as the owner's search does.

-- How many of the target's messages each query of ``qs`` matches, each counted up to cap.
CREATE FUNCTION memd_keyword_message_counts(target text, qs tsquery[], cap integer)
RETURNS integer[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT coalesce(array_agg((
        SELECT count(*)::integer FROM (
            SELECT 1 FROM messages h
            WHERE h.user_id = target AND target = current_setting('memd.user_id', true)
              AND h.content_tsv @@ w.q AND NOT h.is_pruned
            LIMIT cap) AS found) ORDER BY w.i), '{}')
    FROM unnest(qs) WITH ORDINALITY AS w (q, i)
$$;

-- The target's messages that match q (in session sess, unless it is NULL), ranked by
-- how well they match rank_by.
CREATE FUNCTION memd_keyword_message_ranks(target text, q tsquery, rank_by tsquery,
                                           lim integer, sess text)
RETURNS TABLE (message_id text, created_at double precision, rank real)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT h.message_id, h.created_at, ts_rank(h.content_tsv, rank_by)
    FROM messages h
    WHERE h.user_id = target AND target = current_setting('memd.user_id', true)
      AND h.content_tsv @@ q AND NOT h.is_pruned AND (sess IS NULL OR h.session_id = sess)
    ORDER BY 3 DESC, 1
    LIMIT lim
$$;

-- No caller: a SECURITY DEFINER function nobody calls is attack surface only (as 013).
DROP FUNCTION IF EXISTS memd_keyword_message_ids(text, tsquery, integer, text);

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        GRANT EXECUTE ON FUNCTION memd_keyword_message_counts(text, tsquery[], integer),
            memd_keyword_message_ranks(text, tsquery, tsquery, integer, text) TO memd_app;
    END IF;
END $$;
