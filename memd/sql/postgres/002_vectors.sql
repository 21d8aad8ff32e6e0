-- Embeddings (pgvector). {dim} is the embedder's dimension, filled in by the migration
-- runner and recorded in schema_meta: a database keeps the dimension it was created with.
-- Vectors are unit length, so cosine distance (<=>) orders them; similarity = 1 - distance.
-- HNSW indexes are built per leaf partition, so a per-user KNN walks one partition's graph.

ALTER TABLE memories ADD COLUMN embedding vector({dim});
ALTER TABLE messages ADD COLUMN embedding vector({dim});

CREATE INDEX idx_memories_embedding ON memories USING hnsw (embedding vector_cosine_ops)
    WHERE is_active;
CREATE INDEX idx_messages_embedding ON messages USING hnsw (embedding vector_cosine_ops)
    WHERE embedding IS NOT NULL;
-- Embedding backfill: messages with text but no vector yet.
CREATE INDEX idx_messages_needs_embedding ON messages (user_id, created_at)
    WHERE embedding IS NULL AND content IS NOT NULL;
