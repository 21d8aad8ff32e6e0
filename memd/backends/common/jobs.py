"""The durable job queue (memd.backends.service_roles.JobQueue); each backend claims jobs
its own way (``claim_jobs``)."""

from __future__ import annotations

import uuid
from typing import Any

from memd.backends.common.columns import JOB_COLUMNS
from memd.backends.common.connection import Part
from memd.types import Job, QueuedJob


class Jobs(Part):
    """Jobs: enqueue, reschedule, complete, fail, list, retry."""

    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        raise NotImplementedError

    def enqueue_job(
        self, kind: str, payload: dict[str, Any], user_id: str | None, now: float,
        run_after: float | None = None,
    ) -> str:
        job_id = uuid.uuid4().hex
        self._write_new(self._sql(
            "INSERT INTO jobs (job_id, kind, user_id, payload, run_after, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)"),
            (job_id, kind, user_id, self._json(payload),
             now if run_after is None else run_after, now))
        return job_id

    def enqueue_job_once(
        self, job_id: str, kind: str, payload: dict[str, Any], user_id: str | None,
        now: float, run_after: float | None = None,
    ) -> bool:
        d = self._dialect
        return self._write(d.sql(
            f"{d.ignore_prefix} jobs (job_id, kind, user_id, payload, run_after, created_at) "
            f"VALUES (?, ?, ?, ?, ?, ?){d.ignore_suffix}"),
            (job_id, kind, user_id, self._json(payload),
             now if run_after is None else run_after, now)) > 0

    def reschedule_job(self, job_id: str, attempts: int, run_after: float,
                       payload: dict[str, Any], now: float) -> bool:
        return self._write(self._sql(
            "UPDATE jobs SET run_after = ?, payload = ?, attempts = 0, lease_until = NULL, "
            "last_error = NULL, updated_at = ? WHERE job_id = ? AND status = 'pending' "
            "AND attempts = ?"),
            (run_after, self._json(payload), now, job_id, attempts)) > 0

    def complete_job(self, job_id: str) -> bool:
        return self._write(self._sql("DELETE FROM jobs WHERE job_id = ?"), (job_id,)) > 0

    def fail_job(self, job_id: str, error: str, retry_at: float | None) -> None:
        if retry_at is None:
            self._write(self._sql("UPDATE jobs SET status = 'dead', last_error = ?, "
                                  "lease_until = NULL WHERE job_id = ?"), (error, job_id))
        else:
            self._write(self._sql("UPDATE jobs SET last_error = ?, run_after = ?, "
                                  "lease_until = NULL WHERE job_id = ?"),
                        (error, retry_at, job_id))

    def pending_jobs(self) -> int:
        return int(self._rows("SELECT count(*) FROM jobs WHERE status = 'pending' "
                              "AND kind <> 'schedule'")[0][0])

    _QUEUED = (f"SELECT {JOB_COLUMNS}, status, coalesce(updated_at, created_at) "
               "FROM jobs WHERE ")

    def _queued(self, r: tuple[Any, ...]) -> QueuedJob:
        return QueuedJob(job=self._map.job(r[:8]), state=r[8], updated_at=r[9])

    def list_jobs(self, state: str, user_id: str | None = None,
                  limit: int = 100) -> list[QueuedJob]:
        where, params = "status = ?", [state]
        if user_id is not None:
            where, params = where + " AND user_id = ?", [*params, user_id]
        rows = self._rows(self._sql(self._QUEUED + where
                                    + " ORDER BY created_at, job_id LIMIT ?"),
                          (*params, limit))
        return [self._queued(r) for r in rows]

    def get_job(self, job_id: str) -> QueuedJob | None:
        rows = self._rows(self._sql(self._QUEUED + "job_id = ?"), (job_id,))
        return self._queued(rows[0]) if rows else None

    def retry_dead_jobs(self, now: float, user_id: str | None = None,
                        job_id: str | None = None) -> int:
        params: list[Any]
        where, params = "status = 'dead'", [now, now]  # run_after, updated_at
        for column, value in (("user_id", user_id), ("job_id", job_id)):
            if value is not None:
                where, params = f"{where} AND {column} = ?", [*params, value]
        return self._write(self._sql(
            "UPDATE jobs SET status = 'pending', attempts = 0, run_after = ?, "
            f"lease_until = NULL, updated_at = ? WHERE {where}"), params)
