-- Where learning is paused (memd pause): while a row names the user and the workspace
-- of a call ('' for every workspace of the user), the call is forwarded with its memory
-- block but nothing of it is stored or extracted.
CREATE TABLE learning_paused (
    user_id    TEXT NOT NULL,
    workspace  TEXT NOT NULL,
    paused_at  REAL NOT NULL,
    PRIMARY KEY (user_id, workspace)
);
