-- Full-text indexes with per-user terms. Every indexed word carries the user's mark
-- (memd_fts_text: 12 consonants from a hash of the user id, then the word), so a user's
-- query reads only that user's doclists: BM25's document frequencies are the user's
-- own (no other user's text shapes a ranking), and a query's cost no longer grows with
-- the number of users. Consonants leave the porter stemmer's measure of the word
-- unchanged, so stemming is as before. The tables are contentless (the text lives in
-- memories/messages); the UNINDEXED ids are stored for the join back.
DROP TABLE memories_fts;
DROP TABLE messages_fts;

CREATE VIRTUAL TABLE memories_fts USING fts5(
    content_text, memory_id UNINDEXED,
    content = '', contentless_delete = 1, contentless_unindexed = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, session_id UNINDEXED, message_id UNINDEXED,
    content = '', contentless_delete = 1, contentless_unindexed = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- Forgetting leaves no trace in the full-text index either.
INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);

INSERT INTO memories_fts (rowid, content_text, memory_id)
    SELECT rowid, memd_fts_text(user_id, content_text), memory_id FROM memories;
INSERT INTO messages_fts (rowid, content, session_id, message_id)
    SELECT rowid, memd_fts_text(user_id, content), session_id, message_id FROM messages
    WHERE content IS NOT NULL AND content != '';

-- One merged segment per index: without this the rebuilt index is one huge level-0
-- segment that FTS5's incremental merging drags along on every later insert, which makes
-- appends write several times the pages and stall periodically.
INSERT INTO memories_fts (memories_fts) VALUES ('optimize');
INSERT INTO messages_fts (messages_fts) VALUES ('optimize');
-- Note for a later migration: SQLite 3.54's DROP TABLE of a contentless_unindexed FTS5
-- table leaves its <name>_content shadow table behind; drop that too.
