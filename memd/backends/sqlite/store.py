"""The SQLite store: every role of the Store protocol over one file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from memd.backends.base import Store, StoreClass, Vector
from memd.backends.common.candidates import compose_candidates
from memd.backends.common.columns import USAGE_COLUMNS, marks
from memd.backends.sqlite.connection import MAP
from memd.backends.sqlite.memories import SQLiteMemories
from memd.backends.sqlite.upkeep import SQLiteUpkeep
from memd.config import Settings
from memd.errors import StorageError
from memd.keys import key_for
from memd.types import Found, Job, MemoryFilter, Usage


class SQLiteStore(SQLiteUpkeep, SQLiteMemories):
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

    _json_text = "json_extract({column}, '$.{key}')"

    def check_row_security(self) -> None:
        """Nothing to check: one SQLite file belongs to one daemon, which filters every
        query by user itself."""

    def _before_erase(self, user_id: str,
                      where: dict[str, tuple[str, tuple[Any, ...]]]) -> None:
        for table in ("memories", "messages"):
            self._drop_index_rows(table, *where[table])
        self._vectors.pop(user_id, None)  # read again from vec0 at the next use
        self._message_vectors.pop(user_id, None)

    _unembed = ", has_embedding = 0"

    def _before_prune(self, user_id: str, where: str, params: tuple[Any, ...]) -> None:
        self._drop_index_rows("messages", where, params)
        self._message_vectors.pop(user_id, None)  # read again from vec0 at the next use

    def scrub(self) -> None:
        """Leave no deleted row readable in the files: FTS5 keeps a deleted row's terms in
        its segments until they are merged (its secure-delete option covers only what it
        rewrites), so each index is merged whole ('optimize'); the WAL, which holds the
        pages as they were before, is checkpointed and truncated; VACUUM rewrites the
        file without its free pages (secure_delete zeroes what a delete frees), and its
        own WAL frames are checkpointed and truncated in turn."""
        if self.path == ":memory:":
            return
        with self._lock, self._checkpoint_lock:
            try:
                for fts in ("memories_fts", "messages_fts"):
                    with self._db:
                        self._db.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.execute("VACUUM")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except apsw.Error as exc:
                raise StorageError(f"SQLite: cannot scrub the database: {exc}") from exc

    def deep_scrub(self) -> list[str]:
        self.scrub()
        return ["full-text indexes merged, WAL checkpointed and truncated, database "
                "vacuumed (freed pages are zeroed: secure_delete)"]

    def list_usage(self, user_id: str, limit: int = 100) -> list[Usage]:
        rows = self._rows(f"SELECT {USAGE_COLUMNS} FROM usage_log WHERE user_id = ? "
                          "ORDER BY created_at DESC LIMIT ?", (user_id, limit))
        return [MAP.usage(r) for r in rows]

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
        return [MAP.job(r) for r in rows]

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

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        ranks = self._start_side_ranking(user_id, query, keyword_k)
        return compose_candidates(
            self, user_id, query, vector, flt, knn_k=knn_k, keyword_k=keyword_k,
            entities=entities, entity_k=entity_k, frequent_k=frequent_k,
            keyword_hits=None if ranks is None
            else lambda: self._keyword_rows(user_id, ranks.result(), keyword_k, flt),
        )


# Checked where the contract is made: the type checker holds this class to the protocol
# the registry hands out, and its stores to Store (a drifted signature fails mypy, and
# the error names the member).
_REGISTERED: StoreClass = SQLiteStore


def _as_store(store: SQLiteStore) -> Store:
    """Never called: the type checker's check that every method matches the protocol."""
    return store
