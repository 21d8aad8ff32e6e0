"""SQLite vectors: sqlite-vec's vec0 tables are the durable index, and an in-process
KNN cache of each user's vectors (numpy) sits in front of them.

vec0 scans a user's partition in C, vector by vector, so a KNN over a large user's
memories costs most of a compile's budget; a float32 matrix per user answers the same
query exactly (same cosine, same order) in a fraction of that. A long message history
(MESSAGE_EXACT_USER and more) is held as float16 copies and a few bits per vector
instead (SignedVectors): a third of the memory, and a search that finds 99 % of the
exact one's 10 nearest in a fraction of its time. The cache is loaded from vec0 on a
user's first query (a message history on its second search) and kept in step by the
store's own writes. Another process writing the same file (the CLI beside the daemon)
changes SQLite's ``data_version``; the store then drops the cache, as it does after any
rolled-back transaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from memd.backends.base import Vector
from memd.backends.common.columns import marks
from memd.backends.common.connection import Part
from memd.backends.sqlite.connection import SQLiteConnection
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
# A SignedVectors search orders by cosine the RERANK (at least RERANK_PER_K * k) vectors
# whose sides of its hyperplanes are nearest the query's.
RERANK = 800
RERANK_PER_K = 40
#: Search filters whose masks a user's vectors keep (UserVectors._mask).
MASKS_KEPT = 8


def blob(vector: Vector) -> bytes:
    """A vector as vec0 stores it."""
    return np.asarray(vector, dtype=np.float32).tobytes()


class UserVectors:
    """One user's vectors: a growable matrix plus liveness, activity and workspace."""

    dtype: Any = np.float32
    arrays: tuple[str, ...] = ("mat", "live", "active", "ws")  # one row per vector

    def __init__(self, dim: int, rows: Iterable[tuple[str, bytes, str, int]]) -> None:
        rows = list(rows)
        self._allocate(dim, len(rows))
        self.ids: list[str] = [r[0] for r in rows]
        self.pos = {mid: i for i, mid in enumerate(self.ids)}
        if rows:  # one copy of all the blobs joined, not one numpy call per row
            joined = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            self._put(0, joined.reshape(len(rows), dim))
        self.live[: len(rows)] = True
        self.active[: len(rows)] = [bool(r[3]) for r in rows]
        for i, r in enumerate(rows):
            self.ws[i] = self._code(r[2])

    @classmethod
    def stacked(cls, dim: int, ids: list[str], workspaces: Sequence[str],
                blocks: Iterable[np.ndarray]) -> UserVectors:
        """Active vectors ``ids`` (in ``workspaces``) from ``blocks`` of their float32
        rows in that order, copied block by block into the matrix."""
        out = cls.__new__(cls)
        out._allocate(dim, len(ids))
        out.ids, out.pos = ids, {mid: i for i, mid in enumerate(ids)}
        at = 0
        for block in blocks:
            out._put(at, block)
            at += len(block)
        if at != len(ids):
            raise ValueError(f"{at} vectors for {len(ids)} ids")
        out.live[:at] = out.active[:at] = True
        out.ws[:at] = [out._code(w) for w in workspaces]
        return out

    def _capacity(self, n: int) -> int:
        return max(64, n * 2)

    def _allocate(self, dim: int, n: int) -> None:
        self.dim = dim
        # the masks searches asked for, by (activity, workspaces, version, size): every
        # change makes a new version, so a mask made while a write changed the vectors
        # (a search holds no lock) is never used again
        self.version = 0
        self._masks: dict[tuple[bool, tuple[str, ...] | None, int, int], np.ndarray] = {}
        cap = self._capacity(n)
        self.mat = np.zeros((cap, dim), dtype=self.dtype)
        self.live = np.zeros(cap, dtype=bool)
        self.active = np.zeros(cap, dtype=bool)
        self.ws_codes: dict[str, int] = {}
        self.ws = np.zeros(cap, dtype=np.int32)

    def _put(self, at: int, vectors: np.ndarray) -> None:
        """Rows ``at`` onwards become ``vectors`` (float32, one per row)."""
        self.mat[at : at + len(vectors)] = vectors

    @property
    def nbytes(self) -> int:
        """What the arrays take (their capacity)."""
        return int(self.mat.nbytes)

    def _code(self, workspace: str) -> int:
        return self.ws_codes.setdefault(workspace, len(self.ws_codes))

    def _grow(self) -> None:
        cap = self._capacity(self.mat.shape[0])
        for name in self.arrays:
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)

    def upsert(self, memory_id: str, vector: Vector, workspace: str, active: bool
               ) -> None:
        i = self.pos.get(memory_id)
        if i is None:
            if len(self.ids) == self.mat.shape[0]:
                self._grow()
            i = len(self.ids)
            self.ids.append(memory_id)
            self.pos[memory_id] = i
        self._put(i, np.asarray(vector, dtype=np.float32)[None])
        self.live[i] = True
        self.active[i] = active
        self.ws[i] = self._code(workspace)
        self.version += 1

    def set_active(self, memory_id: str, active: bool) -> None:
        i = self.pos.get(memory_id)
        if i is not None:
            self.active[i] = active
            self.version += 1

    def remove(self, memory_id: str) -> None:
        i = self.pos.get(memory_id)
        if i is not None:
            self.live[i] = False
            self.mat[i] = 0.0
            self.version += 1

    def vectors_of(self, ids: Iterable[str]) -> dict[str, Vector]:
        """The float32 vectors of those of ``ids`` held here (and not removed), copied
        out in one step."""
        at = {mid: i for mid in ids if (i := self.pos.get(mid)) is not None and self.live[i]}
        block = self.mat[list(at.values())].astype(np.float32, copy=False)
        return dict(zip(at, block, strict=True))

    def _mask(self, active_only: bool, workspaces: Sequence[str] | None) -> np.ndarray:
        """Which vectors a search may return (the caller must not change it): made once
        per set of vectors and filter, as searches repeat the same filter."""
        n = len(self.ids)
        key = (active_only, None if workspaces is None else tuple(workspaces), self.version, n)
        mask = self._masks.get(key)
        if mask is not None:
            return mask
        mask = self.live[:n].copy()
        if active_only:
            mask &= self.active[:n]
        if workspaces is not None:
            codes = [self.ws_codes[w] for w in workspaces if w in self.ws_codes]
            mask &= np.isin(self.ws[:n], codes)
        if len(self._masks) >= MASKS_KEPT:
            self._masks.clear()
        self._masks[key] = mask
        return mask

    def knn(self, query: Vector, k: int, active_only: bool,
            workspaces: Sequence[str] | None) -> list[tuple[str, float]]:
        n = len(self.ids)
        if n == 0 or k <= 0:
            return []
        sims = self.mat[:n] @ np.asarray(query, dtype=np.float32)  # a view: no copy
        return self._best(sims, self._mask(active_only, workspaces), k)

    def _best(self, sims: np.ndarray, ok: np.ndarray, k: int,
              rows: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The ``k`` best by similarity (``sims``, which this overwrites), then id, of
        those ``ok``; ``sims`` is of ``rows`` (of every vector when None)."""
        sims[~ok] = -np.inf
        k = min(k, int(ok.sum()))
        if k == 0:
            return []
        n = len(sims)
        top = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
        at = rows.tolist() if rows is not None else range(n)
        order = sorted((j for j in top.tolist() if ok[j]),
                       key=lambda j: (-float(sims[j]), self.ids[at[j]]))
        return [(self.ids[at[j]], float(sims[j])) for j in order]


_HYPERPLANES: dict[int, np.ndarray] = {}


def hyperplanes(dim: int) -> np.ndarray:
    """``dim`` random hyperplanes of ``dim`` dimensions, their normals as columns: the
    same in every process (seeded), so that a load and a search agree."""
    planes = _HYPERPLANES.get(dim)
    if planes is None:
        rng = np.random.default_rng(dim)
        planes = _HYPERPLANES[dim] = rng.standard_normal((dim, dim)).astype(np.float32)
    return planes


class SignedVectors(UserVectors):
    """A large user's vectors, half the memory and a fraction of the search: float16
    copies, and for each vector the side it lies on of each of ``dim`` random hyperplanes
    through the origin, a bit per hyperplane (SimHash). The share of sides two vectors
    differ on estimates the angle between them, whatever the vectors' distribution (a
    coordinate's own sign does as well only for dense vectors: on sparse ones it finds
    few neighbours). A search takes the RERANK vectors whose sides differ least from the
    query's, then orders those by their cosine. Against the exact order, on 100,000
    MiniLM vectors of conversation turns and 200 others as queries, 99 % of the 10
    nearest are found (bench/README.md)."""

    dtype = np.float16

    def _capacity(self, n: int) -> int:
        return n + n // 4 + 64  # a quarter to grow by, not the double

    def _allocate(self, dim: int, n: int) -> None:
        super()._allocate(dim, n)
        # a row of 64 bits (sides) per word of the vectors: a search counts a word of
        # all of them at a time, not a vector at a time
        self.signs = np.zeros((-(-dim // 64), self.mat.shape[0]), dtype=np.uint64)

    def _grow(self) -> None:
        super()._grow()
        signs = np.zeros((self.signs.shape[0], self.mat.shape[0]), dtype=np.uint64)
        signs[:, : self.signs.shape[1]] = self.signs
        self.signs = signs

    def _signs(self, vectors: np.ndarray) -> np.ndarray:
        """The sides of ``vectors`` (one, or one per row) as 64-bit words."""
        bits = np.packbits(np.asarray(vectors, dtype=np.float32) @ hyperplanes(self.dim) > 0,
                           axis=-1)
        pad = self.signs.shape[0] * 8 - bits.shape[-1]
        if pad:
            bits = np.concatenate([bits, np.zeros((*bits.shape[:-1], pad), np.uint8)], -1)
        return np.ascontiguousarray(bits).view(np.uint64)

    def _put(self, at: int, vectors: np.ndarray) -> None:
        super()._put(at, vectors)
        self.signs[:, at : at + len(vectors)] = self._signs(vectors).T

    @property
    def nbytes(self) -> int:
        return int(self.mat.nbytes + self.signs.nbytes)

    def knn(self, query: Vector, k: int, active_only: bool,
            workspaces: Sequence[str] | None) -> list[tuple[str, float]]:
        n = len(self.ids)
        if n == 0 or k <= 0:
            return []
        mask = self._mask(active_only, workspaces)
        q = np.asarray(query, dtype=np.float32)
        words = self._signs(q)
        # bits apart per vector (at most dim: 16 bits hold them), a word of every
        # vector at a time, into the same two buffers each time
        apart = np.zeros(n, dtype=np.uint16)
        differ, count = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint8)
        for row, word in zip(self.signs, words, strict=True):
            np.bitwise_xor(row[:n], word, out=differ)
            apart += np.bitwise_count(differ, out=count)
        apart[~mask] = self.dim + 1  # never before a vector that may be returned
        r = max(RERANK, RERANK_PER_K * k)
        rows = np.argpartition(apart, r - 1)[:r] if r < n else np.arange(n)
        sims = self.mat[rows].astype(np.float32) @ q
        return self._best(sims, mask[rows], k, rows)


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
