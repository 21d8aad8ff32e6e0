"""The PostgreSQL store: every role of the Store protocol over one database."""

from __future__ import annotations

from collections.abc import Sequence

from memd.auth import current_actor
from memd.backends.base import Store, StoreClass
from memd.backends.common.columns import USAGE_COLUMNS
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.memories import PostgresMemories
from memd.backends.postgres.queries import JOB_RETURNING
from memd.backends.postgres.scrub import deep_scrub
from memd.backends.postgres.upkeep import PostgresUpkeep
from memd.config import Settings
from memd.types import Job, Usage


class PostgresStore(PostgresUpkeep, PostgresMemories):
    """The Store protocol over one PostgreSQL database (pgvector and pg_trgm required).

    ``partitions`` are the hash partition counts of (sessions, memories, history) used when
    the schema is first created; an existing database keeps the counts it was made with.
    """

    #: The ``db`` settings it opens, as the error for an unknown one lists them.
    db_forms = "a postgresql:// URL"

    @classmethod
    def opens(cls, db: str) -> bool:
        return db.startswith(("postgresql://", "postgres://"))

    @classmethod
    def from_settings(cls, settings: Settings, dim: int) -> PostgresStore:
        return cls(settings.db, dim=dim, partitions=settings.pg_partitions,
                   connect_timeout=settings.pg_connect_timeout)

    _json_text = "{column} ->> '{key}'"
    _memory_side_tables = ("memory_stats",)

    def _erase_shared(self, user_id: str, prompts: Sequence[str], cached: Sequence[str],
                      *, account: bool) -> dict[str, int]:
        """Through memd_erase_shared (sql/postgres/017_erase.sql): the acting user may not
        touch these rows under row-level security, and sees no other user's sessions,
        which decide whether a system prompt is still used."""
        with self._txn() as conn:
            if current_actor() is None:  # the owner: the function erases memd.user_id
                conn.execute("SELECT set_config('memd.user_id', %s, true)", (user_id,))
            rows = conn.execute("SELECT tbl, n FROM memd_erase_shared(%s, %s, %s, %s)",
                                (user_id, list(prompts), list(cached), account)).fetchall()
        return {str(t): int(n) for t, n in rows}

    def _anonymize_usage(self, user_id: str, session_id: str | None) -> int:
        """Through memd_anonymize_usage (sql/postgres/019_anonymize_usage.sql): under
        row-level security the acting user may not write a row that is not its own."""
        with self._txn() as conn:
            if current_actor() is None:
                conn.execute("SELECT set_config('memd.user_id', %s, true)", (user_id,))
            row = conn.execute("SELECT memd_anonymize_usage(%s, %s)",
                               (user_id, session_id)).fetchone()
        return int(row[0]) if row else 0

    def scrub(self) -> None:
        """Nothing at each erasure: a deleted row's bytes stay in the table's and its
        indexes' pages and in the WAL until :meth:`deep_scrub` (``memd forget
        --scrub``) rewrites them, which locks each table while it runs."""

    def deep_scrub(self) -> list[str]:
        with self._pool.connection() as conn:
            return deep_scrub(conn)

    def list_usage(self, user_id: str, limit: int = 100) -> list[Usage]:
        rows = self._rows(f"SELECT {USAGE_COLUMNS} FROM usage_log WHERE user_id = %s "
                          "ORDER BY created_at DESC, usage_id LIMIT %s", (user_id, limit))
        return [MAP.usage(r) for r in rows]

    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        # SKIP LOCKED: daemons sharing the database never claim the same job twice.
        rows = self._write_rows(
            "WITH due AS (SELECT job_id FROM jobs WHERE status = 'pending' "
            "AND run_after <= %s AND (lease_until IS NULL OR lease_until <= %s) "
            "ORDER BY run_after, created_at LIMIT %s FOR UPDATE SKIP LOCKED) "
            "UPDATE jobs j SET lease_until = %s, attempts = j.attempts + 1, updated_at = %s "
            f"FROM due WHERE j.job_id = due.job_id RETURNING {JOB_RETURNING}",
            (now, now, limit, now + lease_seconds, now),
        )
        jobs = [MAP.job(r) for r in rows]
        return sorted(jobs, key=lambda j: (j.run_after, j.created_at, j.id))

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        if not hashes:
            return {}
        rows = self._rows(
            "SELECT content_hash, vector FROM embedding_cache WHERE model = %s "
            "AND content_hash = ANY(%s)",
            (model, list(dict.fromkeys(hashes))),
        )
        return {h: bytes(v) for h, v in rows}


# Checked where the contract is made: the type checker holds this class to the protocol
# the registry hands out, and its stores to Store (a drifted signature fails mypy, and
# the error names the member).
_REGISTERED: StoreClass = PostgresStore


def _as_store(store: PostgresStore) -> Store:
    """Never called: the type checker's check that every method matches the protocol."""
    return store
