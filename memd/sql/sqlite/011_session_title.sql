-- A session's title: a few words naming what it is about, shown beside the messages
-- recalled from it (memd.engine.titles). Derived from the sanitized text of its first
-- user message; NULL until then, and in sessions older than the column.
ALTER TABLE sessions ADD COLUMN title TEXT;
