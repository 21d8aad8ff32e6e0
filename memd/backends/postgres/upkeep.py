"""PostgreSQL's part of the scheduled upkeep (memd.engine.schedule): the retention
sweep's deletes (a message's vector and full-text vector live in its own row); the
history's monthly partitions are made by PostgresPartitions.ensure_history_partitions."""

from __future__ import annotations

from memd.backends.common.queries import BUMP_HISTORY_VERSION
from memd.backends.postgres.messages import PostgresMessages


class PostgresUpkeep(PostgresMessages):
    """Retention."""

    def delete_inactive_messages(self, user_id: str, before: float) -> tuple[int, int]:
        with self.transaction():
            sessions = self._inactive_sessions(user_id, before)
            if not sessions:
                return 0, 0
            deleted = self._write("DELETE FROM messages WHERE user_id = %s "
                                  "AND session_id = ANY(%s)", (user_id, sessions))
            self._write_many(self._sql(BUMP_HISTORY_VERSION),
                             [(user_id, s) for s in sessions])
        return deleted, len(sessions)
