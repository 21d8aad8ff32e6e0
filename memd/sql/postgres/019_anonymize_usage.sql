-- Erasure that keeps a user's usage rows for the totals (erase_usage = "anonymize";
-- memd.backends.common.erase): the rows of ``target`` (of its session ``session`` only,
-- when given) lose everything that names the user: user_id becomes '(erased)' (no valid
-- id has parentheses), session, workspace and metadata are cleared. Row-level security
-- lets the acting user write only rows that are its own, and the new user_id is not, so
-- this is SECURITY DEFINER and, like memd_erase_shared, acts only on the user that
-- ``memd.user_id`` names. The new user_id moves each row to another hash partition.
CREATE FUNCTION memd_anonymize_usage(target text, session text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    c bigint;
BEGIN
    IF target IS DISTINCT FROM current_setting('memd.user_id', true) THEN
        RAISE EXCEPTION 'memd: only the acting user can be erased'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE usage_log SET user_id = '(erased)', session_id = NULL, workspace = '',
                         metadata = '{}'
        WHERE user_id = target AND (session IS NULL OR session_id = session);
    GET DIAGNOSTICS c = ROW_COUNT;
    RETURN c;
END $$;

REVOKE EXECUTE ON FUNCTION memd_anonymize_usage(text, text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        GRANT EXECUTE ON FUNCTION memd_anonymize_usage(text, text) TO memd_app;
    END IF;
END $$;
