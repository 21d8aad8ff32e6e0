-- Admission decisions of context virtualization (memd.engine.virtual.admission): the
-- fidelity each tool result first entered the request at while the request was under
-- pressure, its score and the score's parts (type, size, recency, relevance), and the
-- call that decided it. One row per object: an object is admitted once, when first seen.
CREATE TABLE admission_decisions (
    user_id    TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    call_id    TEXT,
    fidelity   INTEGER NOT NULL,
    score      REAL NOT NULL,
    parts      TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (user_id, object_id)
);
CREATE INDEX admission_decisions_session ON admission_decisions (user_id, session_id);
