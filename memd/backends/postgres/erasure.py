"""PostgreSQL erasure: the shared plan (memd.backends.common.erase), with the rows no user
column names erased through functions of the schema (row-level security would hide them
from the acting user), and the deep scrub that rewrites tables and indexes."""

from __future__ import annotations

from collections.abc import Sequence

from memd.auth import current_actor
from memd.backends.common.erase import Erasure
from memd.backends.postgres.partitions import PostgresPartitions


class PostgresErasure(Erasure):
    """Erasure, pruning and scrubbing over one PostgreSQL database."""

    _json_text = "{column} ->> '{key}'"
    _memory_side_tables = ("memory_stats",)
    _unembed = ", embedding = NULL"

    def __init__(self, conn: PostgresPartitions) -> None:
        super().__init__(conn)
        self._pg = conn

    def _erase_shared(self, user_id: str, prompts: Sequence[str], cached: Sequence[str],
                      *, account: bool) -> dict[str, int]:
        """Through memd_erase_shared (sql/postgres/017_erase.sql): the acting user may not
        touch these rows under row-level security, and sees no other user's sessions,
        which decide whether a system prompt is still used."""
        with self._pg.txn() as conn:
            if current_actor() is None:  # the owner: the function erases memd.user_id
                conn.execute("SELECT set_config('memd.user_id', %s, true)", (user_id,))
            rows = conn.execute("SELECT tbl, n FROM memd_erase_shared(%s, %s, %s, %s)",
                                (user_id, list(prompts), list(cached), account)).fetchall()
        return {str(t): int(n) for t, n in rows}

    def _anonymize_usage(self, user_id: str, session_id: str | None) -> int:
        """Through memd_anonymize_usage (sql/postgres/019_anonymize_usage.sql): under
        row-level security the acting user may not write a row that is not its own."""
        with self._pg.txn() as conn:
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
        return self._pg.deep_scrub()
