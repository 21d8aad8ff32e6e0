-- Long paragraphs seen in a user's messages, by hash only, with the sessions they were
-- seen in: a paragraph that comes back in another session is a client's text (users do
-- not retype long paragraphs), and extraction leaves it out (memd.engine.recurring).
-- first_*: where it was first seen (the memories made from it are retired when it
-- recurs); last_session_id and sessions count the sessions it was seen in.
CREATE TABLE paragraphs_seen (
    user_id          TEXT NOT NULL,
    paragraph_hash   TEXT NOT NULL,
    first_session_id TEXT NOT NULL,
    first_message_id TEXT NOT NULL,
    last_session_id  TEXT NOT NULL,
    sessions         INTEGER NOT NULL,
    first_seen       REAL NOT NULL,
    last_seen        REAL NOT NULL,
    PRIMARY KEY (user_id, paragraph_hash)
);
