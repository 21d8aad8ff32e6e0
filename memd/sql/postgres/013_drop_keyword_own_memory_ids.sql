-- memd_keyword_own_memory_ids (010) has had no caller since memd_keyword_own_memory_top
-- (011) took its place: a SECURITY DEFINER function nobody calls is attack surface only.
DROP FUNCTION IF EXISTS memd_keyword_own_memory_ids(
    text, text, text, tsquery, integer, boolean, text[]);
