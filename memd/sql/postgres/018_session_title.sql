-- A session's title: a few words naming what it is about, shown beside the messages
-- recalled from it (memd.engine.titles). Derived from the sanitized text of its first
-- user message; NULL until then, and in sessions older than the column. No default: the
-- column is added to the catalog only, without rewriting the partitions.
ALTER TABLE sessions ADD COLUMN title text;
