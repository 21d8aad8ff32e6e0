-- A session's history version: bumped by every change to its stored messages other than
-- an append (an append shows in turn_count). The engine's history cache keeps a
-- session's recent messages under (turn_count, history_version): equal numbers mean the
-- stored history is what it read, and a higher turn_count alone means that only new
-- turns were added, which it reads by themselves.
ALTER TABLE sessions ADD COLUMN history_version INTEGER NOT NULL DEFAULT 0;
