-- A message's copy with its secrets replaced by placeholders (memd.privacy): NULL when the
-- sanitizer found nothing to replace, so most rows cost nothing. ``content`` keeps what
-- the client sent, which only its owner reads back and chain hashes cover; everything
-- derived from a message reads coalesce(sanitized, content), the keyword index among
-- them: content_tsv is made anew from it (the head and tail of a long text, as in 012),
-- which rewrites the messages partitions once.
ALTER TABLE messages ADD COLUMN sanitized text;
DROP INDEX idx_messages_fts;
ALTER TABLE messages DROP COLUMN content_tsv;
ALTER TABLE messages ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS (
    to_tsvector('english', CASE
        WHEN length(coalesce(sanitized, content, '')) <= 65536
            THEN coalesce(sanitized, content, '')
        ELSE left(coalesce(sanitized, content), 32768) || ' '
            || right(coalesce(sanitized, content), 32768)
    END)) STORED;
CREATE INDEX idx_messages_fts ON messages USING gin (content_tsv);
