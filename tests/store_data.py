"""What the store tests share: the vector size, rows to store, and how each registered
store is opened on a fresh database (the contract suite, tests/test_store_contract.py,
and the per-backend tests, tests/test_sqlite_backend.py and tests/test_postgres_backend.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pg

from memd.backends.base import Store
from memd.registry import store_class
from memd.types import Fact, Memory, Session

DIM = 8
PG_PARTITIONS = (4, 4, 4)


def _pg_migrate(dsn: str) -> None:
    store_class("postgres")(dsn, dim=DIM, partitions=PG_PARTITIONS).close()


def pg_dsn() -> str:
    """A fresh database, cloned from one migrated once for the session (DIM, 4x4x4)."""
    return pg.database(("contract", DIM, PG_PARTITIONS), _pg_migrate)


# How the tests open each store registered under ``memd.stores``: a fresh place for it in
# ``tmp_path`` (or on the test run's PostgreSQL), then the arguments of its class after
# that place and ``dim``, as memd.open passes them. A store registered without an entry
# here fails the contract suite (test_every_registered_store_has_a_place_to_open).
Place = tuple[Any, dict[str, Any]]
PLACES: dict[str, Callable[[Path], Place]] = {
    "sqlite": lambda tmp_path: (tmp_path / "contract.db", {}),
    "postgres": lambda tmp_path: (pg_dsn(), {"partitions": PG_PARTITIONS}),
}


def open_store(name: str, place: Place) -> Store:
    """The registered store ``name`` opened at ``place``, as memd.open opens one."""
    where, kwargs = place
    store: Store = store_class(name)(where, dim=DIM, **kwargs)
    return store


def vec(*hot: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    for i in hot:
        v[i] = 1.0
    return v / np.linalg.norm(v)


def session(user: str = "alice", sid: str | None = None, **kw: object) -> Session:
    return Session(id=sid or uuid.uuid4().hex, user_id=user, workspace=None, created_at=1.0,
                   updated_at=1.0, **kw)  # type: ignore[arg-type]


def memory(text: str, user: str = "alice", **kw: object) -> Memory:
    fields: dict[str, object] = dict(
        id=uuid.uuid4().hex, user_id=user, text=text, content_hash=uuid.uuid4().hex,
        token_count=len(text.split()), created_at=10.0, updated_at=10.0,
    )
    fields.update(kw)
    return Memory(**fields)  # type: ignore[arg-type]


def fact(value: str, **kw: object) -> Fact:
    fields: dict[str, object] = dict(
        id=uuid.uuid4().hex, user_id="alice", category="identity", key="name", value=value,
        confidence=1.0, importance=0.8, created_at=1.0, updated_at=1.0,
    )
    fields.update(kw)
    return Fact(**fields)  # type: ignore[arg-type]


def record_calls(store: Store) -> None:
    """Alice's calls c1..c5 (c3 and c4 made at the same instant) and one of bob's."""
    for call_id, created, sid, ws in (("c1", 100.0, "s1", None), ("c2", 200.0, "s2", "proj"),
                                      ("c3", 300.0, "s1", "proj"), ("c4", 300.0, "s2", None),
                                      ("c5", 400.0, "s1", None)):
        store.record_call(call_id, "alice", sid, ws, "gpt-x", created,
                          {"tokens": {"memory": int(created)}})
    store.record_call("b1", "bob", "s1", None, "gpt-x", 250.0, {})


def call_ids(calls: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in calls]
