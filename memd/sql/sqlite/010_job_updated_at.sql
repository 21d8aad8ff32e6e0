-- When a job last changed (enqueued, claimed for an attempt, retried), for the listing of
-- pending and dead jobs; NULL in rows older than the column, which read as created_at.
ALTER TABLE jobs ADD COLUMN updated_at REAL;
