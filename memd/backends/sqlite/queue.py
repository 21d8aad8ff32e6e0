"""SQLite's ways with the job queue and the embedding cache: a claim inside the store's
one transaction (one connection: no other daemon claims meanwhile), and cache reads in
chunks of 500 parameters."""

from __future__ import annotations

from collections.abc import Sequence

from memd.backends.common.columns import marks
from memd.backends.common.embeddings import EmbeddingCachePart
from memd.backends.common.jobs import Jobs
from memd.types import Job


class SQLiteJobs(Jobs):
    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        with self.transaction():
            rows = self._rows(
                "SELECT job_id, kind, payload, user_id, attempts + 1, run_after, created_at, "
                "last_error FROM jobs WHERE status = 'pending' AND run_after <= ? "
                "AND (lease_until IS NULL OR lease_until <= ?) "
                "ORDER BY run_after, created_at LIMIT ?",
                (now, now, limit),
            )
            self._write_many(
                "UPDATE jobs SET lease_until = ?, attempts = attempts + 1, updated_at = ? "
                "WHERE job_id = ?",
                [(now + lease_seconds, now, r[0]) for r in rows],
            )
        return [self._map.job(r) for r in rows]


class SQLiteEmbeddingCache(EmbeddingCachePart):
    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        if not hashes:
            return {}
        unique = list(dict.fromkeys(hashes))
        out: dict[str, bytes] = {}
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            rows = self._rows(
                "SELECT content_hash, vector FROM embedding_cache WHERE model = ? AND "
                f"content_hash IN ({marks('?', len(chunk))})",
                (model, *chunk),
            )
            out.update({h: bytes(v) for h, v in rows})
        return out
