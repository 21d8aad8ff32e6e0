-- Faults of context virtualization (memd.engine.virtual.faults): each time the model
-- asked memd for what a degraded object held (a memory_query question, or a
-- memory_restore of one object), what it asked, what memd answered, which objects the
-- answer came from, the tokens the answer saved against restoring those objects whole,
-- and how long serving it took. The session's turn tells how long a restore stays pinned.
CREATE TABLE fault_history (
    user_id        TEXT NOT NULL,
    fault_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    call_id        TEXT,
    kind           TEXT NOT NULL,
    question       TEXT NOT NULL,
    answer         TEXT NOT NULL,
    object_ids     TEXT NOT NULL,
    tokens_avoided INTEGER NOT NULL,
    latency_ms     INTEGER NOT NULL,
    turn           INTEGER NOT NULL,
    created_at     REAL NOT NULL,
    PRIMARY KEY (user_id, fault_id)
);
CREATE INDEX fault_history_session ON fault_history (user_id, session_id, fault_id);
