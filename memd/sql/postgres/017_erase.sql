-- Erasure of a user or a session (memd.backends.common.erase). The per-user tables are
-- emptied through their own row-level security policies; this function deletes what the
-- application role may not touch: the user's account rows (users, api_keys,
-- workspace_members) with ``account``, the system prompts of ``prompts`` that no session
-- uses any more (a check across every user's sessions, which only the owner sees), and
-- the embedding cache's entries of ``hashes``. SECURITY DEFINER, so it erases only the
-- user that ``memd.user_id`` names: an API key's user (row-level security sets it) erases
-- itself and no one else; the owner (the CLI on the host) sets it for the user it erases.
CREATE FUNCTION memd_erase_shared(target text, prompts text[], hashes text[],
                                  account boolean)
RETURNS TABLE (tbl text, n bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    c bigint;
BEGIN
    IF target IS DISTINCT FROM current_setting('memd.user_id', true) THEN
        RAISE EXCEPTION 'memd: only the acting user can be erased'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF account THEN
        DELETE FROM workspace_members WHERE user_id = target;
        GET DIAGNOSTICS c = ROW_COUNT;
        tbl := 'workspace_members'; n := c; RETURN NEXT;
        DELETE FROM api_keys WHERE user_id = target;
        GET DIAGNOSTICS c = ROW_COUNT;
        tbl := 'api_keys'; n := c; RETURN NEXT;
        DELETE FROM users WHERE user_id = target;
        GET DIAGNOSTICS c = ROW_COUNT;
        tbl := 'users'; n := c; RETURN NEXT;
    END IF;
    DELETE FROM system_prompts p WHERE p.prompt_hash = ANY (prompts)
        AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.system_prompt_hash = p.prompt_hash);
    GET DIAGNOSTICS c = ROW_COUNT;
    tbl := 'system_prompts'; n := c; RETURN NEXT;
    DELETE FROM embedding_cache WHERE content_hash = ANY (hashes);
    GET DIAGNOSTICS c = ROW_COUNT;
    tbl := 'embedding_cache'; n := c; RETURN NEXT;
END $$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        GRANT EXECUTE ON FUNCTION memd_erase_shared(text, text[], text[], boolean) TO memd_app;
    END IF;
END $$;
