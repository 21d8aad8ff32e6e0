"""An exact, in-process KNN cache of each user's memory vectors (numpy), in front of
sqlite-vec.

sqlite-vec's vec0 scans a user's partition in C at about 1 µs per 384-dim vector, so a
KNN over 10k memories costs ~10 ms, most of the 15 ms compile budget. A float32 matrix
per user answers the same query exactly (same cosine, same order) in well under a
millisecond. The vec0 table stays the durable index: the cache is loaded from it on a
user's first query and kept in step by the store's own writes. Another process writing
the same file (the CLI beside the daemon) changes SQLite's ``data_version``; the store
then drops the cache, as it does after any rolled-back transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from memd.backends.base import Vector


class UserVectors:
    """One user's vectors: a growable matrix plus liveness, activity and workspace."""

    def __init__(self, dim: int, rows: Iterable[tuple[str, bytes, str, int]]) -> None:
        rows = list(rows)
        self.dim = dim
        self.ids: list[str] = [r[0] for r in rows]
        self.pos = {mid: i for i, mid in enumerate(self.ids)}
        cap = max(64, len(rows) * 2)
        self.mat = np.zeros((cap, dim), dtype=np.float32)
        for i, r in enumerate(rows):
            self.mat[i] = np.frombuffer(r[1], dtype=np.float32)
        self.live = np.zeros(cap, dtype=bool)
        self.live[: len(rows)] = True
        self.active = np.zeros(cap, dtype=bool)
        self.active[: len(rows)] = [bool(r[3]) for r in rows]
        self.ws_codes: dict[str, int] = {}
        self.ws = np.zeros(cap, dtype=np.int32)
        for i, r in enumerate(rows):
            self.ws[i] = self._code(r[2])

    def _code(self, workspace: str) -> int:
        return self.ws_codes.setdefault(workspace, len(self.ws_codes))

    def _grow(self) -> None:
        cap = self.mat.shape[0] * 2
        for name in ("mat", "live", "active", "ws"):
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
        self.mat[i] = np.asarray(vector, dtype=np.float32)
        self.live[i] = True
        self.active[i] = active
        self.ws[i] = self._code(workspace)

    def set_active(self, memory_id: str, active: bool) -> None:
        i = self.pos.get(memory_id)
        if i is not None:
            self.active[i] = active

    def remove(self, memory_id: str) -> None:
        i = self.pos.get(memory_id)
        if i is not None:
            self.live[i] = False
            self.mat[i] = 0.0

    def knn(self, query: Vector, k: int, active_only: bool,
            workspaces: Sequence[str] | None) -> list[tuple[str, float]]:
        n = len(self.ids)
        if n == 0 or k <= 0:
            return []
        mask = self.live[:n].copy()
        if active_only:
            mask &= self.active[:n]
        if workspaces is not None:
            codes = [self.ws_codes[w] for w in workspaces if w in self.ws_codes]
            mask &= np.isin(self.ws[:n], codes)
        sims = self.mat[:n] @ np.asarray(query, dtype=np.float32)  # a view: no copy
        sims[~mask] = -np.inf
        live = int(mask.sum())
        if live == 0:
            return []
        k = min(k, live)
        top = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
        order = sorted((j for j in top.tolist() if mask[j]),
                       key=lambda j: (-float(sims[j]), self.ids[j]))
        return [(self.ids[j], float(sims[j])) for j in order]
