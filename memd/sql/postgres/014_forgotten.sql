-- What a user made memd forget, so that extraction never brings it back: one digest per
-- forgotten extraction (SHA-256 over the source message's content hash and the memory's
-- or fact's normalized words; see memd.engine.write.forgotten_digest). Only digests: the
-- forgotten words are not kept. Small (one row per forget), so not partitioned.
CREATE TABLE forgotten (
    user_id    text COLLATE "C" NOT NULL,
    digest     text COLLATE "C" NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (user_id, digest)
);
ALTER TABLE forgotten ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, DELETE ON forgotten TO memd_app;
    CREATE POLICY memd_own_rows ON forgotten TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
