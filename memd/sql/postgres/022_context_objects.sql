-- Context virtualization (memd.engine.virtual): the tool results of a long session held
-- as objects at a fidelity (0 full, 2 compact, 3 stub), with the texts of each fidelity
-- and their token counts, and every change of fidelity. object_id derives from the
-- session, the tool call and the content hash: a resent history finds its objects.
-- A few hundred rows per long session, read by (user, session): not partitioned.
CREATE TABLE context_objects (
    user_id       text COLLATE "C" NOT NULL,
    session_id    text COLLATE "C" NOT NULL,
    object_id     text COLLATE "C" NOT NULL,
    content_hash  text COLLATE "C" NOT NULL,
    object_type   text NOT NULL,
    source_tool   text,
    source_key    text,
    tool_call_id  text,
    turn_start    integer NOT NULL,
    turn_end      integer NOT NULL,
    content       text NOT NULL,
    compact       text NOT NULL,
    stub          text NOT NULL,
    tokens_l0     integer NOT NULL,
    tokens_l2     integer NOT NULL,
    tokens_l3     integer NOT NULL,
    fidelity      integer NOT NULL DEFAULT 0,
    pinned        boolean NOT NULL DEFAULT false,
    superseded_by text,
    created_at    double precision NOT NULL,
    updated_at    double precision NOT NULL,
    PRIMARY KEY (user_id, session_id, object_id)
);
CREATE INDEX context_objects_key ON context_objects (user_id, session_id, source_key);

CREATE TABLE fidelity_transitions (
    user_id       text COLLATE "C" NOT NULL,
    transition_id text COLLATE "C" NOT NULL,
    session_id    text COLLATE "C" NOT NULL,
    object_id     text COLLATE "C" NOT NULL,
    call_id       text,
    from_fidelity integer NOT NULL,
    to_fidelity   integer NOT NULL,
    trigger       text NOT NULL,
    zone          text NOT NULL,
    tokens        integer NOT NULL,
    created_at    double precision NOT NULL,
    PRIMARY KEY (user_id, transition_id)
);
CREATE INDEX fidelity_transitions_session
    ON fidelity_transitions (user_id, session_id, created_at);

ALTER TABLE context_objects ENABLE ROW LEVEL SECURITY;
ALTER TABLE fidelity_transitions ENABLE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memd_app') THEN
        RETURN;  -- no role, no policy: RLS on with no policy denies everything but the owner
    END IF;
    GRANT SELECT, INSERT, UPDATE, DELETE ON context_objects, fidelity_transitions TO memd_app;
    CREATE POLICY memd_own_rows ON context_objects TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
    CREATE POLICY memd_own_rows ON fidelity_transitions TO memd_app
        USING (user_id = current_setting('memd.user_id', true))
        WITH CHECK (user_id = current_setting('memd.user_id', true));
END $$;
