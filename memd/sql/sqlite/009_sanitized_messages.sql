-- A message's copy with its secrets replaced by placeholders (memd.privacy): NULL when the
-- sanitizer found nothing to replace, so most rows cost nothing. ``content`` keeps what
-- the client sent, which only its owner reads back and chain hashes cover; everything
-- derived from a message (the full-text index messages_fts, embeddings, extraction,
-- memory blocks) reads coalesce(sanitized, content).
ALTER TABLE messages ADD COLUMN sanitized TEXT;
