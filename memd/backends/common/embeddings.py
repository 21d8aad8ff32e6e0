"""The embedding cache (memd.backends.service_roles.EmbeddingCache); each backend reads it
its own way (``get_cached_embeddings``)."""

from __future__ import annotations

from collections.abc import Sequence

from memd.backends.common.connection import Part


class EmbeddingCachePart(Part):
    """Vectors by (model, text hash)."""

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        raise NotImplementedError

    def put_cached_embeddings(self, model: str, items: Sequence[tuple[str, bytes]]) -> None:
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} embedding_cache (model, content_hash, vector) "
                  f"VALUES (?, ?, ?){d.ignore_suffix}"),
            [(model, h, v) for h, v in items])
