"""The SQLite store: every role of the Store protocol over one file, composed of the
connection and one part per role."""

from __future__ import annotations

from pathlib import Path

from memd.backends.base import StoreClass
from memd.backends.common.composed import ComposedStore
from memd.backends.sqlite.connection import SQLiteConnection
from memd.backends.sqlite.erasure import SQLiteErasure
from memd.backends.sqlite.fulltext import SideRanker
from memd.backends.sqlite.memories import SQLiteMemories
from memd.backends.sqlite.messages import SQLiteMessages
from memd.backends.sqlite.queue import SQLiteEmbeddingCache, SQLiteJobs
from memd.backends.sqlite.vectors import SQLiteVectors
from memd.backends.sqlite.words import SQLiteWords
from memd.config import Settings
from memd.keys import key_for


class SQLiteStore(ComposedStore):
    """The Store protocol over one SQLite file (or ``:memory:``)."""

    #: The ``db`` settings it opens, as the error for an unknown one lists them.
    db_forms = "'sqlite' (memd.db in the data dir) or a path to a .db file"

    @classmethod
    def opens(cls, db: str) -> bool:
        return db in ("sqlite", "") or db.endswith(".db")

    @classmethod
    def from_settings(cls, settings: Settings, dim: int) -> SQLiteStore:
        return cls(settings.db_path, dim=dim,
                   key=key_for(settings.encryption, settings.db_path))

    def __init__(self, path: str | Path = ":memory:", dim: int = 384,
                 key: str | None = None) -> None:
        side = SideRanker(str(path), key)
        self.connection = conn = SQLiteConnection(path, dim, key)
        self.path = conn.path
        self.vectors = vectors = SQLiteVectors(conn)
        self.words = SQLiteWords(conn)
        messages = SQLiteMessages(conn, vectors, self.words)
        self.memories = SQLiteMemories(conn, vectors, side)
        self.erasure = SQLiteErasure(conn, messages, vectors)
        super().__init__(
            conn, messages=messages, memories=self.memories, jobs=SQLiteJobs(conn),
            erasure=self.erasure, embeddings=SQLiteEmbeddingCache(conn), vectors=vectors)
        self.warm_vectors = self._warm

    def _warm(self, user_id: str) -> int:
        """The user's vectors loaded ahead of their first search, and the full-text index
        of a long message history (memd.backends.sqlite.words)."""
        return self.vectors.warm_vectors(user_id) + self.words.warm(user_id)


# Checked where the contract is made: the type checker holds this class to the protocol
# the registry hands out (each part is held to its role where it is handed over above).
_REGISTERED: StoreClass = SQLiteStore
