-- A message's keyword index holds at most its first and last 32,768 characters. Agents
-- send whole files and logs as tool results, and PostgreSQL refuses a tsvector over 1 MB
-- ("string is too long for tsvector"), so a 2 MB log could not be stored at all; the
-- head and the tail are what a keyword search of a huge message finds useful anyway (the
-- SQLite backend indexes the same part: KEYWORD_INDEX_CHARS in backends/base.py). The
-- message itself is stored whole. The generated column is made anew, which rewrites the
-- messages partitions once.
DROP INDEX idx_messages_fts;
ALTER TABLE messages DROP COLUMN content_tsv;
ALTER TABLE messages ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS (
    to_tsvector('english', CASE
        WHEN length(coalesce(content, '')) <= 65536 THEN coalesce(content, '')
        ELSE left(content, 32768) || ' ' || right(content, 32768)
    END)) STORED;
CREATE INDEX idx_messages_fts ON messages USING gin (content_tsv);
