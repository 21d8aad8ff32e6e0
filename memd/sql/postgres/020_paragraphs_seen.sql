-- Long paragraphs seen in a user's messages, by hash only, with the sessions they were
-- seen in: a paragraph that comes back in another session is a client's text (users do
-- not retype long paragraphs), and extraction leaves it out (memd.engine.recurring).
-- first_*: where it was first seen (the memories made from it are retired when it
-- recurs); last_session_id and sessions count the sessions it was seen in. A few rows
-- per session at most, so not partitioned.
CREATE TABLE paragraphs_seen (
    user_id          text COLLATE "C" NOT NULL,
    paragraph_hash   text COLLATE "C" NOT NULL,
    first_session_id text COLLATE "C" NOT NULL,
    first_message_id text COLLATE "C" NOT NULL,
    last_session_id  text COLLATE "C" NOT NULL,
    sessions         integer NOT NULL,
    first_seen       double precision NOT NULL,
    last_seen        double precision NOT NULL,
    PRIMARY KEY (user_id, paragraph_hash)
);
ALTER TABLE paragraphs_seen ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, UPDATE, DELETE ON paragraphs_seen TO memd_app;
    CREATE POLICY memd_own_rows ON paragraphs_seen TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
