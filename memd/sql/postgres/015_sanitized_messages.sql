-- A message's copy with its secrets replaced by placeholders (memd.privacy): NULL when the
-- sanitizer found nothing to replace, so most rows cost nothing. ``content`` keeps what
-- the client sent, which only its owner reads back and chain hashes cover; everything
-- derived from a message reads coalesce(sanitized, content), the keyword index among
-- them.
--
-- content_tsv stops being a generated column and is set by a trigger from
-- coalesce(sanitized, content) (the head and tail of a long text, as in 012). Changing
-- the generated expression instead would rewrite every history partition and rebuild
-- every index of each in this one transaction, which exhausts the lock table
-- (max_locks_per_transaction) at the production layout's thousands of leaves; dropping
-- the expression keeps the stored values (rows older than this have no sanitized copy)
-- and rewrites nothing.
ALTER TABLE messages ADD COLUMN sanitized text;
ALTER TABLE messages ALTER COLUMN content_tsv DROP EXPRESSION;

CREATE FUNCTION memd_message_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    body text := coalesce(NEW.sanitized, NEW.content, '');
BEGIN
    NEW.content_tsv := to_tsvector('english', CASE
        WHEN length(body) <= 65536 THEN body
        ELSE left(body, 32768) || ' ' || right(body, 32768)
    END);
    RETURN NEW;
END
$$;

CREATE TRIGGER messages_tsv BEFORE INSERT OR UPDATE OF content, sanitized, content_tsv
    ON messages FOR EACH ROW EXECUTE FUNCTION memd_message_tsv();
