-- Authenticated (team) mode: users, API keys (SHA-256 only), workspace membership.
-- Memories of a workspace are readable by every member of that workspace.
CREATE TABLE users (
    user_id    TEXT PRIMARY KEY,
    name       TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);

CREATE TABLE api_keys (
    key_id       TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users (user_id),
    key_hash     TEXT NOT NULL UNIQUE,      -- SHA-256 hex of the key; the key is never stored
    label        TEXT NOT NULL DEFAULT '',
    created_at   REAL NOT NULL,
    last_used_at REAL,
    revoked_at   REAL
);
CREATE INDEX idx_api_keys_user ON api_keys (user_id);

CREATE TABLE workspace_members (
    workspace  TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (user_id),
    created_at REAL NOT NULL,
    PRIMARY KEY (workspace, user_id)
);
CREATE INDEX idx_workspace_members_user ON workspace_members (user_id);
