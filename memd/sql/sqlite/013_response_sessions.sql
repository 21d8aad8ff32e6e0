-- The session each stored OpenAI Responses answer belongs to, by the response's id: a
-- request that continues a response kept upstream (previous_response_id) sends only its
-- new items, and is a turn of that session (memd.server.responses).
CREATE TABLE response_sessions (
    user_id     TEXT NOT NULL,
    response_id TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (user_id, response_id)
);
CREATE INDEX response_sessions_session ON response_sessions (user_id, session_id);
