"""SQLite erasure: the shared plan (memd.backends.common.erase) plus the full-text and
vec0 rows beside the rows it deletes, the vector caches, and the scrub that leaves no
deleted row readable in the files."""

from __future__ import annotations

from typing import Any

from memd.backends.common.erase import Erasure
from memd.backends.sqlite.connection import SQLiteConnection
from memd.backends.sqlite.messages import SQLiteMessages
from memd.backends.sqlite.vectors import SQLiteVectors


class SQLiteErasure(Erasure):
    """Erasure, pruning and scrubbing over one SQLite file."""

    _json_text = "json_extract({column}, '$.{key}')"
    _unembed = ", has_embedding = 0"

    def __init__(self, conn: SQLiteConnection, messages: SQLiteMessages,
                 vectors: SQLiteVectors) -> None:
        super().__init__(conn)
        self._conn = conn
        self._messages = messages
        self._vectors = vectors

    def _before_erase(self, user_id: str,
                      where: dict[str, tuple[str, tuple[Any, ...]]]) -> None:
        for table in ("memories", "messages"):
            self._messages.drop_index_rows(table, *where[table])
        self._vectors.memory_vectors.pop(user_id, None)  # read again from vec0 at next use
        self._messages.forget_held(user_id)

    def _before_prune(self, user_id: str, where: str, params: tuple[Any, ...]) -> None:
        self._messages.drop_index_rows("messages", where, params)
        self._messages.forget_held(user_id)

    def scrub(self) -> None:
        self._conn.scrub()

    def deep_scrub(self) -> list[str]:
        self.scrub()
        return ["full-text indexes merged, WAL checkpointed and truncated, database "
                "vacuumed (freed pages are zeroed: secure_delete)"]
