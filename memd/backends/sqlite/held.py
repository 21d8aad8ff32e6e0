"""A user's vectors held in memory, searched in numpy: UserVectors, a float32 matrix
searched exactly (same cosine, same order as vec0), and SignedVectors, for a long message
history, float16 copies and a bit per random hyperplane (the side of it each vector lies
on), searched by how many bits differ from the query's and then by cosine. SQLite's
vector part (memd.backends.sqlite.vectors) loads them from vec0 and keeps them in step
with the store's writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from memd.backends.base import Vector

# A SignedVectors search orders by cosine the RERANK (at least RERANK_PER_K * k) vectors
# whose sides of its hyperplanes are nearest the query's.
RERANK = 800
RERANK_PER_K = 40
#: Search filters whose masks a user's vectors keep (UserVectors._mask).
MASKS_KEPT = 8


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
        k = min(k, int(np.count_nonzero(ok)))
        if k == 0:
            return []
        n = len(sims)
        if k < n:  # the k best, and any that tie with the last of them (the id decides)
            edge = sims[np.argpartition(-sims, k - 1)[k - 1]]
            top = np.flatnonzero(sims >= edge)
        else:
            top = np.flatnonzero(ok)
        top = top[ok[top]]
        ids = self.ids
        names = [ids[j] for j in (rows[top] if rows is not None else top).tolist()]
        # (-similarity, id) pairs of Python floats sort without a key function
        ranked = sorted(zip((-sims[top]).tolist(), names, strict=True))[:k]
        return [(mid, -negative) for negative, mid in ranked]


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
