"""PostgreSQL's ways with the job queue and the embedding cache: a claim that skips the
jobs another daemon sharing the database holds (SKIP LOCKED), and cache reads with one
array parameter."""

from __future__ import annotations

from collections.abc import Sequence

from memd.backends.common.embeddings import EmbeddingCachePart
from memd.backends.common.jobs import Jobs
from memd.backends.postgres.partitions import PostgresPartitions
from memd.backends.postgres.queries import JOB_RETURNING
from memd.types import Job


class PostgresJobs(Jobs):
    def __init__(self, conn: PostgresPartitions) -> None:
        super().__init__(conn)
        self._pg = conn

    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        # SKIP LOCKED: daemons sharing the database never claim the same job twice.
        rows = self._pg.write_rows(
            "WITH due AS (SELECT job_id FROM jobs WHERE status = 'pending' "
            "AND run_after <= %s AND (lease_until IS NULL OR lease_until <= %s) "
            "ORDER BY run_after, created_at LIMIT %s FOR UPDATE SKIP LOCKED) "
            "UPDATE jobs j SET lease_until = %s, attempts = j.attempts + 1, updated_at = %s "
            f"FROM due WHERE j.job_id = due.job_id RETURNING {JOB_RETURNING}",
            (now, now, limit, now + lease_seconds, now),
        )
        jobs = [self._map.job(r) for r in rows]
        return sorted(jobs, key=lambda j: (j.run_after, j.created_at, j.id))



class PostgresEmbeddingCache(EmbeddingCachePart):
    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        if not hashes:
            return {}
        rows = self._rows(
            "SELECT content_hash, vector FROM embedding_cache WHERE model = %s "
            "AND content_hash = ANY(%s)",
            (model, list(dict.fromkeys(hashes))),
        )
        return {h: bytes(v) for h, v in rows}
