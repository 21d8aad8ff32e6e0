"""PostgreSQL vectors as pgvector takes and gives them."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from memd.backends.base import Vector
from memd.errors import StorageError


def vector_array(value: Any) -> NDArray[np.float32]:
    """A loaded vector as float32 numpy (pgvector >= 0.4 loads ``Vector`` objects)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


def as_vector(dim: int, vector: Vector) -> NDArray[np.float32]:
    """``vector`` as a parameter, checked to have the store's ``dim`` entries."""
    arr = np.asarray(vector, dtype=np.float32)
    if arr.shape != (dim,):
        raise StorageError(f"vector has {arr.size} dims, store expects {dim}")
    return arr


class PostgresVectorCache:
    """No vectors in memd's process: pgvector searches in the database (its index in
    PostgreSQL's shared buffers, which outlive memd's restarts), and with several memd
    processes over one database a cache in each would go stale between them."""

    def warm_vectors(self, user_id: str) -> int:
        return 0
