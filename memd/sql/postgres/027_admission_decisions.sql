-- Admission decisions of context virtualization (memd.engine.virtual.admission): the
-- fidelity each tool result first entered the request at while the request was under
-- pressure, its score and the score's parts (type, size, recency, relevance), and the
-- call that decided it. One row per object: an object is admitted once, when first seen.
-- A few hundred rows per long session, read by (user, session): not partitioned.
CREATE TABLE admission_decisions (
    user_id    text COLLATE "C" NOT NULL,
    object_id  text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    call_id    text,
    fidelity   integer NOT NULL,
    score      double precision NOT NULL,
    parts      text NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (user_id, object_id)
);
CREATE INDEX admission_decisions_session ON admission_decisions (user_id, session_id);

ALTER TABLE admission_decisions ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, DELETE ON admission_decisions TO memd_app;
    CREATE POLICY memd_own_rows ON admission_decisions TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
