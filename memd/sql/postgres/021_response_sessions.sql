-- The session each stored OpenAI Responses answer belongs to, by the response's id: a
-- request that continues a response kept upstream (previous_response_id) sends only its
-- new items, and is a turn of that session (memd.server.responses). One row per answer
-- of that API, so not partitioned.
CREATE TABLE response_sessions (
    user_id     text COLLATE "C" NOT NULL,
    response_id text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    created_at  double precision NOT NULL,
    PRIMARY KEY (user_id, response_id)
);
CREATE INDEX response_sessions_session ON response_sessions (user_id, session_id);
ALTER TABLE response_sessions ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, UPDATE, DELETE ON response_sessions TO memd_app;
    CREATE POLICY memd_own_rows ON response_sessions TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
