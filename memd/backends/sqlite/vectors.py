"""SQLite vectors: sqlite-vec's vec0 tables are the durable index, and an in-process
KNN cache of each user's vectors (numpy) sits in front of them.

vec0 scans a user's partition in C, vector by vector, so a KNN over a large user's
memories costs most of a compile's budget; a float32 matrix per user answers the same
query exactly (same cosine, same order) in a fraction of that. A long message history
(MESSAGE_EXACT_USER and more) is held as float16 copies and a few bits per vector
instead: a third of the memory, and a search that finds 99 % of the exact one's 10
nearest in a fraction of its time (both kinds: memd.backends.sqlite.held). The cache is
loaded from vec0 on a user's first query (a message history on its second search) and
kept in step by the store's own writes. Another process writing the same file (the CLI
beside the daemon) changes SQLite's ``data_version``; the store then drops the cache, as
it does after any rolled-back transaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence

import numpy as np

from memd.backends.base import Vector
from memd.backends.common.columns import marks
from memd.backends.common.connection import Part
from memd.backends.sqlite.connection import SQLiteConnection
from memd.backends.sqlite.held import SignedVectors, UserVectors
from memd.errors import StorageError

# Users with fewer than this many embedded messages keep them in memory too (a message
# search's vector channel is then many times cheaper than through vec0, which computes
# every distance in turn: ~80 ms for 100,000), the least recently searched dropped first
# beyond the total (bytes held); bigger histories stay on vec0. Below MESSAGE_EXACT_USER
# exactly (UserVectors), from there on through bits of their directions (SignedVectors).
MESSAGE_CACHE_USER = 131_072
MESSAGE_EXACT_USER = 16_384
MESSAGE_CACHE_BYTES = 128 * 2**20
# The largest k a vec0 KNN takes: loaded through a KNN, a user's message vectors are
# kept only below it (a full answer may not be all of them).
VEC0_K_MAX = 4096
# The sqlite-vec release (CREATE_VERSION major, minor in message_vec_info) whose storage
# of a vec0 table _partition_vectors reads; a table made by another is loaded through a KNN.
# Per chunk of a partition, message_vec_chunks holds a validity bitmap (a bit per slot,
# least significant first) and the slots' rowids (int64); message_vec_vector_chunks00
# the slots' vectors (float32, one after the other); message_vec_rowids each rowid's id.
SHADOW_LAYOUT = (0, 1)


def blob(vector: Vector) -> bytes:
    """A vector as vec0 stores it."""
    return np.asarray(vector, dtype=np.float32).tobytes()


class SQLiteVectors(Part):
    """The vector caches over the connection: each user's memory vectors
    (``memory_vectors``), and the message vectors of users whose histories are below
    MESSAGE_CACHE_USER (``message_vectors``). The memories and messages parts keep them
    in step with their writes; the connection drops them after a rollback."""

    def __init__(self, conn: SQLiteConnection) -> None:
        super().__init__(conn)
        self._conn = conn
        self._lock = conn.lock
        self.dim = conn.dim
        self.memory_vectors: dict[str, UserVectors] = {}
        self.message_vectors: OrderedDict[str, UserVectors | None] = OrderedDict()
        self._message_loads: set[str] = set()  # users whose vectors a thread is loading
        self._message_seen: set[str] = set()  # users who searched messages once already
        self._data_version = -1
        conn.on_rollback.append(self.drop_caches)

    def drop_caches(self) -> None:
        self.memory_vectors.clear()
        self.message_vectors.clear()

    def _check_data_version(self) -> None:
        """Drop the vector caches when another connection changed the file."""
        version = self._conn.data_version()
        if version != self._data_version:
            self.drop_caches()
            self._data_version = version

    def cached_vectors(self, user_id: str) -> UserVectors:
        """The user's memory vectors in memory, (re)loaded when another process wrote."""
        with self._lock:
            self._check_data_version()
            cached = self.memory_vectors.get(user_id)
            if cached is None:
                rows = self._rows(
                    "SELECT memory_id, embedding, workspace, active FROM memory_vec "
                    "WHERE user_id = ?", (user_id,),
                )
                cached = self.memory_vectors[user_id] = UserVectors(self.dim, rows)
            return cached

    def warm_vectors(self, user_id: str) -> int:
        """Load the user's memory vectors, and their message vectors where the message
        cache would hold them, ahead of their first search (``memd serve`` does it at
        start, in a thread). Each load takes the store's lock for itself alone, so a
        write or a search between the two does not wait for both."""
        with self._lock:
            if self._conn.closed:
                return 0
            held = len(self.cached_vectors(user_id).ids)
        with self._lock:
            if self._conn.closed:
                return held
            messages = self._cached_message_vectors(user_id)
            # loaded (or found too many): the search after this one need not start a load
            self._message_seen.add(user_id)
        return held + (len(messages.ids) if messages is not None else 0)

    def put_memory_vector(
        self, memory_id: str, user_id: str, workspace: str | None, active: bool, vector: Vector
    ) -> None:
        if len(vector) != self.dim:
            raise StorageError(f"vector has {len(vector)} dims, store expects {self.dim}")
        self._write("DELETE FROM memory_vec WHERE memory_id = ?", (memory_id,))
        self._write(
            "INSERT INTO memory_vec (memory_id, user_id, embedding, workspace, active) "
            "VALUES (?, ?, ?, ?, ?)",
            (memory_id, user_id, blob(vector), workspace or "", int(active)),
        )
        if user_id in self.memory_vectors:
            self.memory_vectors[user_id].upsert(memory_id, vector, workspace or "", active)

    def message_vectors_or_warm(self, user_id: str) -> UserVectors | None:
        """The user's message vectors if in memory; else None, and from a user's second
        search on, a thread loads them: searches are not slowed by the load (it holds the
        store's lock meanwhile), and one-off searches never pay for it."""
        with self._lock:
            self._check_data_version()
            if user_id in self.message_vectors:
                self.message_vectors.move_to_end(user_id)
                return self.message_vectors[user_id]
            if user_id in self._message_loads:
                return None
            if user_id not in self._message_seen:  # a one-off search: vec0 is enough
                self._message_seen.add(user_id)
                return None
            self._message_loads.add(user_id)
        threading.Thread(target=self._warm_message_vectors, args=(user_id,),
                         name="memd-message-vectors", daemon=True).start()
        return None

    def message_vectors_of(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The vectors of the user's messages among ``ids``: from memory where the user's
        are held, else a key look-up each in vec0 (an IN list there scans the table)."""
        with self._lock:
            self._check_data_version()
            held = self.message_vectors.get(user_id)
            if held is not None:
                return held.vectors_of(ids)
        rows = self._conn.rows_each(
            "SELECT message_id, user_id, embedding FROM message_vec WHERE message_id = ?",
            [(mid,) for mid in dict.fromkeys(ids)])
        return {mid: np.frombuffer(vec, dtype=np.float32).copy()
                for mid, owner, vec in rows if owner == user_id}

    def _warm_message_vectors(self, user_id: str) -> None:
        try:
            with self._lock:
                if not self._conn.closed:
                    self._cached_message_vectors(user_id)
        except StorageError:
            pass  # the next search uses vec0 and tries again
        finally:
            with self._lock:
                self._message_loads.discard(user_id)

    def _cached_message_vectors(self, user_id: str) -> UserVectors | None:
        """The user's message vectors in memory (session id in the workspace slot), or
        None when the user has MESSAGE_CACHE_USER or more of them."""
        with self._lock:
            self._check_data_version()
            cache = self.message_vectors
            if user_id in cache:
                cache.move_to_end(user_id)
                return cache[user_id]
            read = self._partition_vectors(user_id)
            if read is not None:
                vectors = read[1]
            else:
                # A KNN over the partition reads only this user's chunks, where a plain
                # scan of vec0 reads the whole table; a full answer means "maybe more".
                probe = np.full(self.dim, self.dim ** -0.5, dtype=np.float32).tobytes()
                rows = self._rows(
                    "SELECT message_id, embedding, session_id, 1 FROM message_vec "
                    "WHERE embedding MATCH ? AND k = ? AND user_id = ?",
                    (probe, VEC0_K_MAX, user_id),
                )
                fits = len(rows) < min(VEC0_K_MAX, MESSAGE_CACHE_USER)
                vectors = UserVectors(self.dim, rows) if fits else None
            cache[user_id] = vectors
            total = sum(v.nbytes for v in cache.values() if v is not None)
            while total > MESSAGE_CACHE_BYTES and len(cache) > 1:
                _, dropped = cache.popitem(last=False)
                total -= dropped.nbytes if dropped is not None else 0
            return vectors

    def _partition_vectors(self, user_id: str) -> tuple[int, UserVectors | None] | None:
        """How many message vectors the user has, and (when fewer than MESSAGE_CACHE_USER)
        them in memory, with their sessions, read from message_vec's storage
        (SHADOW_LAYOUT): a read of the user's chunks, where a KNN computes a distance per
        vector and returns VEC0_K_MAX at most. None when the table was made by a
        sqlite-vec whose storage this does not read (a KNN loads it then)."""
        try:
            made = dict(self._rows(
                "SELECT key, value FROM message_vec_info "
                "WHERE key IN ('CREATE_VERSION_MAJOR', 'CREATE_VERSION_MINOR')"))
            if (made.get("CREATE_VERSION_MAJOR"), made.get("CREATE_VERSION_MINOR")) != (
                    SHADOW_LAYOUT):
                return None
            slots: list[tuple[int, np.ndarray, list[int]]] = []  # chunk, slots, rowids
            for chunk_id, validity, rowids in self._rows(
                    "SELECT chunk_id, validity, rowids FROM message_vec_chunks "
                    "WHERE partition00 = ?", (user_id,)):
                ids = np.frombuffer(rowids, dtype="<i8")
                valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8),
                                      bitorder="little")[: len(ids)].astype(bool)
                if len(valid) != len(ids):
                    return None
                slots.append((chunk_id, np.flatnonzero(valid), ids[valid].tolist()))
            held = sum(len(rowids) for _, _, rowids in slots)
            if held >= MESSAGE_CACHE_USER:
                return held, None
            names: dict[int, tuple[str, str]] = {}  # rowid -> message id, session id
            every = [r for _, _, rowids in slots for r in rowids]
            for i in range(0, len(every), 500):
                chunk = every[i : i + 500]
                names.update((r, (mid, sid)) for r, mid, sid in self._rows(
                    "SELECT v.rowid, v.id, m.session_id FROM message_vec_rowids v "
                    "JOIN messages m ON m.message_id = v.id "
                    f"WHERE v.rowid IN ({marks('?', len(chunk))})", chunk))
            named = [np.array([r in names for r in rowids], dtype=bool)
                     for _, _, rowids in slots]
            found = [names[r] for _, _, rowids in slots for r in rowids if r in names]

            def blocks() -> Iterator[np.ndarray]:  # a chunk's vectors at a time
                for (chunk_id, at, _), known in zip(slots, named, strict=True):
                    if known.any():
                        [(blob,)] = self._rows("SELECT vectors FROM "
                                               "message_vec_vector_chunks00 WHERE rowid = ?",
                                               (chunk_id,))
                        yield np.frombuffer(blob, dtype="<f4").reshape(-1, self.dim)[at][known]

            kind = UserVectors if held < MESSAGE_EXACT_USER else SignedVectors
            return held, kind.stacked(self.dim, [mid for mid, _ in found],
                                      [sid for _, sid in found], blocks())
        except (StorageError, ValueError):
            return None  # not the storage this reads: the KNN loads it

    def put_message_vector(self, user_id: str, message_id: str, vector: Vector,
                           session_id: str) -> None:
        """Keep the user's cached message vectors in step with a message embedded."""
        cached = self.message_vectors.get(user_id)
        if cached is None:
            return
        if len(cached.ids) >= MESSAGE_CACHE_USER:  # grown past the bound: back to vec0
            self.message_vectors[user_id] = None
        elif len(cached.ids) >= MESSAGE_EXACT_USER and type(cached) is UserVectors:
            del self.message_vectors[user_id]  # the next search loads them as bits
        else:
            cached.upsert(message_id, vector, session_id, True)
