-- Where learning is paused (memd pause): while a row names the user and the workspace
-- of a call ('' for every workspace of the user), the call is forwarded with its memory
-- block but nothing of it is stored or extracted. A few rows per user: not partitioned.
CREATE TABLE learning_paused (
    user_id    text COLLATE "C" NOT NULL,
    workspace  text COLLATE "C" NOT NULL,
    paused_at  double precision NOT NULL,
    PRIMARY KEY (user_id, workspace)
);

ALTER TABLE learning_paused ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, DELETE ON learning_paused TO memd_app;
    CREATE POLICY memd_own_rows ON learning_paused TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
