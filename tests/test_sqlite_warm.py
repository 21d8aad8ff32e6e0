"""SQLite's vector caches loaded ahead of a user's first search (what ``memd serve``
starts in the background): the user's vectors are in memory without any search, and a
search made during or after the load answers as one made on a cold store does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_data import DIM, memory, session

import memd.backends.sqlite.vectors as sq
from memd.backends.sqlite import SQLiteStore
from memd.engine.background.warm import warm_in_background
from memd.types import MemoryFilter, NewMessage

# Seeded random vectors: no two scores tie, so vec0 and the cache (whose orders of tied
# scores may differ) give one order.
_RNG = np.random.default_rng(11)
VECS = _RNG.normal(size=(10, DIM)).astype(np.float32)
VECS /= np.linalg.norm(VECS, axis=1, keepdims=True)
QUERY = VECS[9]


def _filled(path: Path) -> None:
    """A store at ``path`` with 6 memories and 3 embedded messages of alice, and one
    memory of bob."""
    s = SQLiteStore(path, dim=DIM)
    for i in range(6):
        s.insert_memory(memory(f"note {i}", workspace="w" if i % 2 else None),
                        VECS[i])
    s.insert_memory(memory("bob's", user="bob"), VECS[2])
    sess = s.create_session(session())
    said = s.append_messages("alice", sess.id, [NewMessage("user", f"m{i}") for i in range(3)],
                             [1] * 3, [None] * 3, 1.0)
    s.set_message_embeddings("alice", [(m.id, VECS[6 + i]) for i, m in enumerate(said)])
    s.close()


def _answers(s: SQLiteStore) -> tuple[list[Any], list[Any], list[Any]]:
    every = s.nearest_memories("alice", QUERY, 4, MemoryFilter())
    mine = s.nearest_memories("alice", QUERY, 4, MemoryFilter(workspaces=("",)))
    said = s.nearest_messages("alice", QUERY, 3)
    return ([(m.id, round(x, 5)) for m, x in every], [(m.id, round(x, 5)) for m, x in mine],
            [(m.id, round(x, 5)) for m, x in said])


@pytest.fixture
def path(tmp_path: Path) -> Path:
    _filled(tmp_path / "m.db")
    return tmp_path / "m.db"


def _cold(path: Path) -> tuple[list[Any], list[Any], list[Any]]:
    s = SQLiteStore(path, dim=DIM)
    try:
        return _answers(s)
    finally:
        s.close()


def test_the_users_vectors_are_in_memory_without_a_search(path: Path) -> None:
    cold = _cold(path)
    s = SQLiteStore(path, dim=DIM)
    assert not s.vectors.memory_vectors and not s.vectors.message_vectors
    warm_in_background(s, "alice").join()
    assert len(s.vectors.memory_vectors["alice"].ids) == 6
    held = s.vectors.message_vectors["alice"]
    assert held is not None and len(held.ids) == 3
    assert "bob" not in s.vectors.memory_vectors  # only the user named
    assert _answers(s) == cold
    assert s.warm_vectors("alice") == 9  # loaded already: counted, not read again
    s.close()
    assert s.warm_vectors("alice") == 0  # a closed store loads nothing, raises nothing


def test_a_search_during_the_load_waits_for_it_and_answers_as_a_cold_one(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load is held open halfway (the rows read, the matrix not built) while a
    search comes: the search waits for the store's lock and then answers from the cache,
    as a cold store answers."""
    cold = _cold(path)
    loading, go = threading.Event(), threading.Event()
    build = sq.UserVectors.__init__

    def held_open(self: sq.UserVectors, dim: int, rows: Any) -> None:
        if threading.current_thread().name == "memd-warm-vectors":
            loading.set()
            go.wait(30)
        build(self, dim, rows)

    monkeypatch.setattr(sq.UserVectors, "__init__", held_open)
    s = SQLiteStore(path, dim=DIM)
    warm = warm_in_background(s, "alice")
    assert loading.wait(30)
    answered: list[Any] = []
    search = threading.Thread(target=lambda: answered.append(_answers(s)))
    search.start()
    search.join(0.2)
    assert not answered  # still waiting for the load's lock
    go.set()
    warm.join()
    search.join()
    assert answered == [cold]
    assert len(s.vectors.memory_vectors["alice"].ids) == 6
    s.close()


def test_a_user_over_the_message_bound_keeps_searching_messages_in_vec0(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = _cold(path)
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 2)
    s = SQLiteStore(path, dim=DIM)
    assert s.warm_vectors("alice") == 6  # the memories only: 3 messages are too many
    assert s.vectors.message_vectors["alice"] is None
    assert _answers(s) == cold
    assert not s.vectors._message_loads  # no load started by the searches either
    s.close()


def test_an_empty_store_warms_to_nothing(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "e.db", dim=DIM)
    assert s.warm_vectors("local") == 0
    assert s.nearest_memories("local", QUERY, 3, MemoryFilter()) == []
    assert s.nearest_messages("local", QUERY, 3) == []
    s.close()


def test_the_held_vectors_rank_by_similarity_then_id_within_the_filter() -> None:
    """A KNN over the held matrix: the best first, equal similarities in id order, only
    live, active vectors of the filter's workspaces, however large k is."""
    from memd.backends.sqlite.held import UserVectors

    def row(mid: str, v: list[float], ws: str = "", active: int = 1
            ) -> tuple[str, bytes, str, int]:
        return mid, np.asarray(v, dtype=np.float32).tobytes(), ws, active

    held = UserVectors(2, [row("d", [1, 0]), row("b", [1, 0]), row("c", [0.6, 0.8]),
                           row("a", [0, 1]), row("e", [1, 0], active=0),
                           row("f", [1, 0], ws="w"), row("g", [-1, 0])])
    held.remove("g")
    q = np.array([1, 0], dtype=np.float32)
    assert [m for m, _ in held.knn(q, 2, True, ("",))] == ["b", "d"]  # a tie: by id
    found = held.knn(q, 50, True, ("",))
    assert [m for m, _ in found] == ["b", "d", "c", "a"]
    assert [round(s, 6) for _, s in found] == [1.0, 1.0, 0.6, 0.0]
    assert isinstance(found[0][1], float)
    assert [m for m, _ in held.knn(q, 3, False, None)] == ["b", "d", "e"]
    assert [m for m, _ in held.knn(q, 3, True, ("w",))] == ["f"]
    assert held.knn(q, 3, True, ("nowhere",)) == []
