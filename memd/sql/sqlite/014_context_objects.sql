-- Context virtualization (memd.engine.virtual): the tool results of a long session held
-- as objects at a fidelity (0 full, 2 compact, 3 stub), with the texts of each fidelity
-- and their token counts, and every change of fidelity. object_id derives from the
-- session, the tool call and the content hash: a resent history finds its objects.
CREATE TABLE context_objects (
    user_id       TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    object_id     TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    object_type   TEXT NOT NULL,
    source_tool   TEXT,
    source_key    TEXT,
    tool_call_id  TEXT,
    turn_start    INTEGER NOT NULL,
    turn_end      INTEGER NOT NULL,
    content       TEXT NOT NULL,
    compact       TEXT NOT NULL,
    stub          TEXT NOT NULL,
    tokens_l0     INTEGER NOT NULL,
    tokens_l2     INTEGER NOT NULL,
    tokens_l3     INTEGER NOT NULL,
    fidelity      INTEGER NOT NULL DEFAULT 0,
    pinned        INTEGER NOT NULL DEFAULT 0,
    superseded_by TEXT,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    PRIMARY KEY (user_id, session_id, object_id)
);
CREATE INDEX context_objects_key ON context_objects (user_id, session_id, source_key);

CREATE TABLE fidelity_transitions (
    user_id       TEXT NOT NULL,
    transition_id TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    object_id     TEXT NOT NULL,
    call_id       TEXT,
    from_fidelity INTEGER NOT NULL,
    to_fidelity   INTEGER NOT NULL,
    trigger       TEXT NOT NULL,
    zone          TEXT NOT NULL,
    tokens        INTEGER NOT NULL,
    created_at    REAL NOT NULL,
    PRIMARY KEY (user_id, transition_id)
);
CREATE INDEX fidelity_transitions_session
    ON fidelity_transitions (user_id, session_id, created_at);
