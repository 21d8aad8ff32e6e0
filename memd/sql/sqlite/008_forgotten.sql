-- What a user made memd forget, so that extraction never brings it back: one digest per
-- forgotten extraction (SHA-256 over the source message's content hash and the memory's
-- or fact's normalized words; see memd.engine.write.forgotten_digest). Only digests: the
-- forgotten words are not kept. A later message that states the same thing in other
-- words is the user's new statement, and is remembered.
CREATE TABLE forgotten (
    user_id    TEXT NOT NULL,
    digest     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (user_id, digest)
);
