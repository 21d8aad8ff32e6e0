"""SQLite's part of the scheduled upkeep (memd.engine.schedule): the retention sweep's
deletes, with the rows derived from each message beside it (its full-text row, its vec0
row, the in-process vectors); no history partitions to make."""

from __future__ import annotations

from memd.backends.common.queries import BUMP_HISTORY_VERSION
from memd.backends.sqlite.messages import SQLiteMessages


class SQLiteUpkeep(SQLiteMessages):
    """Retention and the partition no-op."""

    def ensure_history_partitions(self, now: float, months: int = 3) -> int:
        return 0  # one table holds every month

    def delete_inactive_messages(self, user_id: str, before: float) -> tuple[int, int]:
        with self.transaction():
            sessions = self._inactive_sessions(user_id, before)
            deleted = 0
            for session_id in sessions:
                # messages_fts has secure-delete on: the terms leave its pages as it
                # rewrites them (a full scrub also merges the index: SQLiteStore.scrub)
                this = ("user_id = ? AND session_id = ?", (user_id, session_id))
                self._drop_index_rows("messages", *this)
                deleted += self._write(f"DELETE FROM messages WHERE {this[0]}", this[1])
                self._write(BUMP_HISTORY_VERSION, (user_id, session_id))
            if sessions:
                self._message_vectors.pop(user_id, None)  # read again from vec0
        return deleted, len(sessions)
