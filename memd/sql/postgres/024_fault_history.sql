-- Faults of context virtualization (memd.engine.virtual.faults): each time the model
-- asked memd for what a degraded object held (a memory_query question, or a
-- memory_restore of one object), what it asked, what memd answered, which objects the
-- answer came from, the tokens the answer saved against restoring those objects whole,
-- and how long serving it took. The session's turn tells how long a restore stays pinned.
-- A few rows per long session, read by (user, session): not partitioned.
CREATE TABLE fault_history (
    user_id        text COLLATE "C" NOT NULL,
    fault_id       text COLLATE "C" NOT NULL,
    session_id     text COLLATE "C" NOT NULL,
    call_id        text,
    kind           text NOT NULL,
    question       text NOT NULL,
    answer         text NOT NULL,
    object_ids     text NOT NULL,
    tokens_avoided integer NOT NULL,
    latency_ms     integer NOT NULL,
    turn           integer NOT NULL,
    created_at     double precision NOT NULL,
    PRIMARY KEY (user_id, fault_id)
);
CREATE INDEX fault_history_session ON fault_history (user_id, session_id, fault_id);

ALTER TABLE fault_history ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, DELETE ON fault_history TO memd_app;
    CREATE POLICY memd_own_rows ON fault_history TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
