-- Vector indexes (sqlite-vec vec0). {dim} is the embedder's dimension, filled in by the
-- migration runner and recorded in schema_meta; a data dir keeps the dimension it was
-- created with. user_id is a partition key, so a KNN scans only that user's vectors.

CREATE VIRTUAL TABLE memory_vec USING vec0(
    memory_id TEXT PRIMARY KEY,
    user_id TEXT PARTITION KEY,
    embedding float[{dim}] distance_metric=cosine,
    workspace TEXT,
    active INTEGER
);

CREATE VIRTUAL TABLE message_vec USING vec0(
    message_id TEXT PRIMARY KEY,
    user_id TEXT PARTITION KEY,
    embedding float[{dim}] distance_metric=cosine,
    session_id TEXT
);
