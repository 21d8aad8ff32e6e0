"""The Store protocol's contract, run against every registered store on a real database.

The stores are those registered under the ``memd.stores`` entry points (memd.registry),
each opened as memd.open opens it, at a place :data:`store_data.PLACES` gives it (a
file in ``tmp_path``, a fresh database on the test run's PostgreSQL); a newly registered
store fails :func:`test_every_registered_store_has_a_place_to_open` until it has one,
then every test here runs against it too.

A contract test gets the store through :class:`Recorded`, which lets through the
Protocol's methods only and notes which ones each backend was called with;
:func:`test_every_protocol_method_is_exercised`, the last test, fails if any method of
the Protocol (of any of its role protocols) went uncalled on a backend. Tests of one
backend's internals are in test_sqlite_backend.py and test_postgres_backend.py.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_data import (
    DIM,
    PLACES,
    Place,
    call_ids,
    fact,
    memory,
    open_store,
    record_calls,
    session,
    vec,
)

from memd import registry
from memd.backends.base import Store
from memd.context_objects import (
    AdmissionDecision,
    ContextObject,
    Fault,
    FidelityTransition,
    ObjectSummaries,
)
from memd.errors import Conflict, NotFound
from memd.types import MemoryFilter, NewMessage, Provenance, Scope, Tier, Usage

BACKENDS = registry.names("memd.stores")


def protocol_methods() -> list[str]:
    """Every public method of :class:`Store`, from each protocol it is composed of."""
    return sorted({
        name for proto in Store.__mro__ if getattr(proto, "_is_protocol", False)
        for name, value in vars(proto).items()
        if not name.startswith("_") and inspect.isfunction(value)
    })


PROTOCOL_METHODS = protocol_methods()
# Which Protocol methods each backend's store was called with, and which contract tests
# ran on it, in this test run.
CALLED: dict[str, set[str]] = {name: set() for name in BACKENDS}
RAN: dict[str, set[str]] = {name: set() for name in BACKENDS}


class Recorded:
    """A store as a contract test sees it: the Protocol's methods (and attributes) of the
    backend's store, each call noted in ``CALLED`` on its way through. Nothing else of
    the store is reachable, so a contract test cannot lean on one backend's internals."""

    def __init__(self, store: Store, called: set[str]) -> None:
        self._store = store
        self._called = called
        self.closed = False

    @property
    def dim(self) -> int:
        return self._store.dim

    @property
    def concurrent_reads(self) -> bool:
        return self._store.concurrent_reads

    @property
    def concurrent_writes(self) -> bool:
        return self._store.concurrent_writes

    def close(self) -> None:
        self._called.add("close")
        self.closed = True
        self._store.close()


def _passed_through(name: str) -> Callable[..., Any]:
    def call(self: Recorded, *args: Any, **kwargs: Any) -> Any:
        self._called.add(name)
        return getattr(self._store, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


for _name in PROTOCOL_METHODS:
    if _name != "close":
        setattr(Recorded, _name, _passed_through(_name))


@dataclass
class Backend:
    """A registered store and the place the test opens it at (each open, the same)."""

    name: str
    place: Place
    opened: list[Recorded] = field(default_factory=list)

    def open(self) -> Any:  # a Recorded, which stands for a Store
        s = Recorded(open_store(self.name, self.place), CALLED[self.name])
        self.opened.append(s)
        return s


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    name = request.param
    if name not in PLACES:
        pytest.fail(f"store {name!r} is registered but store_data.PLACES has no place to "
                    "open it at")
    b = Backend(name, PLACES[name](tmp_path))
    yield b
    for s in b.opened:
        if not s.closed:
            s._store.close()


@pytest.fixture
def store(backend: Backend, request: pytest.FixtureRequest) -> Any:
    """The backend's store, fresh and empty (typed Any: a Recorded stands for a Store)."""
    RAN[backend.name].add(request.node.originalname)
    return backend.open()


@pytest.fixture
def reopen(backend: Backend) -> Callable[[], Any]:
    """Open the test's store again, at the same place."""
    return backend.open


def test_every_registered_store_has_a_place_to_open() -> None:
    assert {"sqlite", "postgres"} <= set(BACKENDS)
    assert set(BACKENDS) <= set(PLACES), set(BACKENDS) - set(PLACES)


def test_is_a_store(store: Any) -> None:
    assert isinstance(store._store, Store)
    assert store.schema_version() >= 2
    assert store.dim == DIM and isinstance(store.concurrent_reads, bool)
    assert isinstance(store.concurrent_writes, bool)


# -- sessions and messages ----------------------------------------------------------
def test_sessions_belong_to_their_user(store: Store) -> None:
    s = store.create_session(session("alice", model="gpt-4", context_window=4096))
    got = store.get_session("alice", s.id)
    assert got is not None and got.model == "gpt-4" and got.context_window == 4096
    assert store.get_session("bob", s.id) is None
    assert [x.id for x in store.list_sessions("alice")] == [s.id]
    store.update_session("alice", s.id, summary_text="so far", summary_token_count=3)
    assert store.get_session("alice", s.id).summary_text == "so far"  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        store.update_session("bob", s.id, summary_text="x")


def test_sessions_are_read_by_their_ids_at_once(store: Store) -> None:
    a = store.create_session(session("alice", model="gpt-4"))
    b = store.create_session(replace(session("alice"), workspace="api"))
    bobs = store.create_session(session("bob"))
    store.set_session_title("alice", b.id, "Retry budget")
    got = store.get_sessions("alice", [b.id, bobs.id, "missing", a.id, b.id])
    assert sorted(s.id for s in got) == sorted([a.id, b.id])
    assert {s.id: (s.model, s.workspace, s.title) for s in got} == {
        a.id: ("gpt-4", None, None), b.id: (None, "api", "Retry budget")}
    assert store.get_sessions("alice", []) == []
    assert [s.id for s in store.get_sessions("bob", [a.id, bobs.id])] == [bobs.id]
    many = [f"absent-{i}" for i in range(600)] + [a.id]  # more than one statement's worth
    assert [s.id for s in store.get_sessions("alice", many)] == [a.id]


def test_a_session_title_is_set_once_unless_replaced(store: Store) -> None:
    s = store.create_session(session("alice"))
    assert store.get_session("alice", s.id).title is None  # type: ignore[union-attr]
    assert not store.set_session_title("bob", s.id, "Not bob's")
    assert store.set_session_title("alice", s.id, "Deploy to staging")
    assert not store.set_session_title("alice", s.id, "Something else")
    assert store.get_session("alice", s.id).title == "Deploy to staging"  # type: ignore[union-attr]
    assert store.set_session_title("alice", s.id, "Staging deploy", replace=True)
    assert store.set_session_title("alice", s.id, "Staging deploy", replace=True)
    assert [x.title for x in store.list_sessions("alice")] == ["Staging deploy"]
    assert not store.set_session_title("alice", "missing", "X", replace=True)


def test_append_assigns_monotonic_turns_and_counts(store: Store) -> None:
    s = store.create_session(session())
    a = store.append_messages("alice", s.id, [NewMessage("user", "hi"),
                                              NewMessage("assistant", "hello")],
                              [5, 6], ["h1", "h2"], now=20.0)
    b = store.append_messages("alice", s.id, [NewMessage("user", "again")], [4], [None], 21.0)
    assert [m.turn_index for m in a + b] == [1, 2, 3]
    assert store.get_session("alice", s.id).turn_count == 3  # type: ignore[union-attr]
    got = store.get_messages("alice", s.id)
    assert [m.content for m in got] == ["hi", "hello", "again"]
    assert [m.token_count for m in got] == [5, 6, 4]
    newest = store.get_messages("alice", s.id, newest_first=True, limit=2)
    assert [m.content for m in newest] == ["again", "hello"]
    assert store.get_messages("bob", s.id) == []


def test_last_chain_hash_is_the_newest_message_s(store: Store) -> None:
    s = store.create_session(session())
    assert store.last_chain_hash("alice", s.id) is None
    store.append_messages("alice", s.id, [NewMessage("user", "hi"),
                                          NewMessage("assistant", "hello")],
                          [1, 1], [None, None], 1.0, chain_hashes=["c1", "c2"])
    assert store.last_chain_hash("alice", s.id) == "c2"
    assert store.last_chain_hash("bob", s.id) is None
    store.append_messages("alice", s.id, [NewMessage("user", "x")], [1], [None], 2.0)
    assert store.last_chain_hash("alice", s.id) is None  # the newest has none


def test_append_is_atomic_and_checks_owner(store: Store) -> None:
    s = store.create_session(session())
    with pytest.raises(NotFound):
        store.append_messages("bob", s.id, [NewMessage("user", "x")], [1], [None], 1.0)
    with pytest.raises(ValueError):  # counts don't match: nothing may be written
        store.append_messages("alice", s.id, [NewMessage("user", "a"),
                                              NewMessage("user", "b")], [1], [None], 1.0)
    assert store.get_messages("alice", s.id) == []
    assert store.get_session("alice", s.id).turn_count == 0  # type: ignore[union-attr]


def test_tool_calls_and_metadata_round_trip(store: Store) -> None:
    s = store.create_session(session())
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]
    store.append_messages("alice", s.id, [
        NewMessage("assistant", None, tool_calls=calls, metadata={"k": [1, "two"]}),
        NewMessage("tool", "a.txt", tool_call_id="c1", name="ls"),
    ], [10, 3], [None, "h"], 5.0)
    first, second = store.get_messages("alice", s.id)
    assert first.tool_calls == calls and first.content is None
    assert first.metadata == {"k": [1, "two"]}
    assert second.tool_call_id == "c1" and second.name == "ls"


def test_sanitized_copy_round_trips_and_is_what_the_keyword_index_holds(
    store: Store,
) -> None:
    s = store.create_session(session())
    secret = "token zq7vexmplwk9 for the deploy"
    stored = store.append_messages("alice", s.id, [
        NewMessage("user", secret, sanitized="token [API_KEY_1] for the deploy"),
        NewMessage("user", "nothing to hide about the deploy"),
    ], [1, 1], [None, None], 1.0)
    assert stored[0].sanitized == "token [API_KEY_1] for the deploy"
    first, second = store.get_messages("alice", s.id)
    assert first.content == secret and first.sanitized == "token [API_KEY_1] for the deploy"
    assert first.safe_text == first.sanitized
    assert second.sanitized is None and second.safe_text == second.content
    assert store.get_message("alice", first.id) == first
    assert store.keyword_messages("alice", "zq7vexmplwk9", 5) == []
    assert {m.id for m, _ in store.keyword_messages("alice", "deploy", 5)} == {
        first.id, second.id}


def test_compaction_marks_hide_messages_from_active(store: Store) -> None:
    s = store.create_session(session())
    msgs = store.append_messages("alice", s.id, [NewMessage("user", f"m{i}") for i in range(4)],
                                 [1] * 4, [None] * 4, 1.0)
    store.mark_compressed("alice", s.id, [msgs[0].id, msgs[1].id], "summary-1")
    active = store.get_messages("alice", s.id, active_only=True)
    assert [m.content for m in active] == ["m2", "m3"]
    every = store.get_messages("alice", s.id)
    assert every[0].is_compressed and every[0].compressed_summary_id == "summary-1"


def test_message_search_keyword_and_vector(store: Store) -> None:
    s = store.create_session(session())
    t = store.create_session(session("bob"))
    a = store.append_messages("alice", s.id, [NewMessage("user", "we deploy on kubernetes"),
                                              NewMessage("user", "lunch was pizza")],
                              [1, 1], [None, None], 1.0)
    store.append_messages("bob", t.id, [NewMessage("user", "kubernetes for bob")], [1],
                          [None], 1.0)
    hits = store.keyword_messages("alice", "Kubernetes?", 5)
    assert [m.content for m, _ in hits] == ["we deploy on kubernetes"]
    assert 0 < hits[0][1] <= 1
    assert [m.id for m in store.messages_missing_embedding("alice", 10)] == [a[0].id, a[1].id]
    store.set_message_embeddings("alice", [(a[0].id, vec(0)), (a[1].id, vec(1))])
    assert store.messages_missing_embedding("alice", 10) == []
    near = store.nearest_messages("alice", vec(0), 1)
    assert near[0][0].id == a[0].id and near[0][1] == pytest.approx(1.0, abs=1e-5)
    assert store.nearest_messages("bob", vec(0), 5) == []


def test_message_vectors_by_id(store: Store) -> None:
    s = store.create_session(session())
    t = store.create_session(session("bob"))
    a = store.append_messages("alice", s.id, [NewMessage("user", f"note {i}") for i in range(4)],
                              [1] * 4, [None] * 4, 1.0)
    b = store.append_messages("bob", t.id, [NewMessage("user", "bob's note")], [1], [None], 1.0)
    store.set_message_embeddings("alice", [(a[0].id, vec(0)), (a[1].id, vec(1)),
                                           (a[3].id, vec(3))])
    store.set_message_embeddings("alice", [(a[0].id, vec(5))])  # embedded again: the latest
    store.set_message_embeddings("bob", [(b[0].id, vec(2))])
    store.prune_messages("alice", [a[3].id])
    asked = [a[0].id, a[1].id, a[2].id, a[3].id, b[0].id, "no-such-message", a[0].id]
    # Read as they are stored, then again with the user's vectors held in memory (SQLite).
    for _ in range(2):
        got = store.get_message_vectors("alice", asked)
        assert sorted(got) == sorted([a[0].id, a[1].id])  # not a[2] (never embedded),
        assert np.allclose(got[a[0].id], vec(5))  # a[3] (pruned), bob's or unknown
        assert np.allclose(got[a[1].id], vec(1))
        assert list(store.get_message_vectors("bob", asked)) == [b[0].id]
        store.warm_vectors("alice")
    assert store.get_message_vectors("alice", []) == {}


def test_pruned_messages_are_kept_but_never_read(store: Store) -> None:
    s = store.create_session(session())
    a = store.append_messages("alice", s.id, [NewMessage("user", "my badge is 4471"),
                                              NewMessage("assistant", "noted: badge 4471"),
                                              NewMessage("user", "we deploy on friday")],
                              [1] * 3, [None] * 3, 1.0)
    store.set_message_embeddings("alice", [(a[0].id, vec(0)), (a[2].id, vec(1))])
    version = store.get_session("alice", s.id).history_version
    assert store.prune_messages("bob", [a[0].id]) == []  # not bob's
    pruned = store.prune_messages("alice", [a[1].id, a[0].id, a[1].id])
    assert [(m.id, m.is_pruned) for m in pruned] == [(a[0].id, True), (a[1].id, True)]
    assert store.prune_messages("alice", [a[0].id]) == []  # flagged already
    assert store.get_session("alice", s.id).history_version > version
    every = store.get_messages("alice", s.id)
    assert [m.content for m in every] == ["my badge is 4471", "noted: badge 4471",
                                          "we deploy on friday"]
    assert [m.is_pruned for m in every] == [True, True, False]
    assert [m.id for m in store.get_messages("alice", s.id, active_only=True)] == [a[2].id]
    assert [m.id for m in store.recent_messages("alice", s.id, 100)] == [a[2].id]
    assert store.keyword_messages("alice", "badge", 5) == []
    assert [m.id for m, _ in store.nearest_messages("alice", vec(0), 5)] == [a[2].id]
    assert store.messages_missing_embedding("alice", 10) == []  # never embedded again
    store.set_message_embeddings("alice", [(a[1].id, vec(0))])
    assert [m.id for m, _ in store.nearest_messages("alice", vec(0), 5)] == [a[2].id]


# -- memories -----------------------------------------------------------------------
def test_memory_round_trip_and_hash_lookup(store: Store) -> None:
    m = memory("I prefer tabs", workspace="projA", tags=("style",), entities=("tabs",),
               metadata={"src": "cli"}, tier=Tier.PROCEDURAL, provenance=Provenance.PREFERENCE)
    store.insert_memory(m, vec(0))
    got = store.get_memory("alice", m.id)
    assert got == m
    assert store.get_memory("bob", m.id) is None
    assert store.find_by_hash("alice", "projA", m.content_hash) == m
    assert store.find_by_hash("alice", None, m.content_hash) is None
    assert store.find_memory_id(m.id) == ("alice", m)


def test_knn_is_per_user_and_filtered(store: Store) -> None:
    a = store.insert_memory(memory("a"), vec(0))
    b = store.insert_memory(memory("b", workspace="projB"), vec(0, 1))
    c = store.insert_memory(memory("c", tier=Tier.SESSION), vec(1))
    store.insert_memory(memory("bob's", user="bob"), vec(0))
    near = store.nearest_memories("alice", vec(0), 10, MemoryFilter())
    assert [m.id for m, _ in near] == [a.id, b.id, c.id]
    assert near[0][1] > near[1][1] > near[2][1]
    only_global = store.nearest_memories("alice", vec(0), 10, MemoryFilter(workspaces=("",)))
    assert b.id not in [m.id for m, _ in only_global]
    tiers = store.nearest_memories("alice", vec(0), 10, MemoryFilter(tiers=(Tier.SESSION,)))
    assert [m.id for m, _ in tiers] == [c.id]
    assert store.nearest_memories("carol", vec(0), 10, MemoryFilter()) == []


def test_inactive_expired_and_superseded_are_hidden(store: Store) -> None:
    a = store.insert_memory(memory("old", expires_at=50.0), vec(0))
    b = store.insert_memory(memory("replaced"), vec(0))
    c = store.insert_memory(memory("live"), vec(0))
    store.update_memory("alice", b.id, is_active=False, superseded_by=c.id)
    flt = MemoryFilter(now=100.0)
    assert [m.id for m, _ in store.nearest_memories("alice", vec(0), 10, flt)] == [c.id]
    assert [m.id for m in store.list_memories("alice", flt)] == [c.id]
    every = MemoryFilter(include_inactive=True, include_superseded=True, include_expired=True)
    assert {m.id for m in store.list_memories("alice", every)} == {a.id, b.id, c.id}
    assert store.count_memories("alice", flt) == 1
    assert store.expire_memories(100.0) == 1
    assert not store.get_memory("alice", a.id).is_active  # type: ignore[union-attr]


def test_keyword_search_tracks_text_updates(store: Store) -> None:
    m = store.insert_memory(memory("deploys with docker"), vec(0))
    flt = MemoryFilter()
    assert [x.id for x, _ in store.keyword_memories("alice", "docker", 5, flt)] == [m.id]
    store.update_memory("alice", m.id, text="deploys with kubernetes", updated_at=11.0)
    assert store.keyword_memories("alice", "docker", 5, flt) == []
    assert [x.id for x, _ in store.keyword_memories("alice", "kubernetes", 5, flt)] == [m.id]
    assert store.keyword_memories("bob", "kubernetes", 5, flt) == []
    assert store.keyword_memories("alice", '"); DROP TABLE memories; --', 5, flt) == []


def test_keyword_ranking_ignores_other_users_rows(store: Store) -> None:
    pie = store.insert_memory(memory("apple pie recipe"), vec(0))
    bread = store.insert_memory(memory("banana bread loaf"), vec(0))
    flt = MemoryFilter()
    before = dict((m.id, s) for m, s in store.keyword_memories("alice", "apple banana", 5, flt))
    assert set(before) == {pie.id, bread.id}
    for i in range(60):  # makes "apple" common in the store, but not in alice's rows
        store.insert_memory(memory(f"apple orchard note {i}", user="bob"), vec(1))
    after = dict((m.id, s) for m, s in store.keyword_memories("alice", "apple banana", 5, flt))
    assert after == pytest.approx(before)
    assert [m.id for m, _ in store.keyword_memories("alice", "apples", 5, flt)] == [pie.id]


def test_keyword_channel_reaches_past_top_matches_the_filter_drops(store: Store) -> None:
    """The best keyword matches may all be filtered out (another workspace, inactive):
    the channel still returns the best k that pass, however far down they rank."""
    for i in range(12):
        store.insert_memory(memory(f"kiwi kiwi kiwi {i}", workspace="other"), vec(0))
    store.insert_memory(memory("kiwi kiwi kiwi gone", is_active=False), vec(0))
    mine = [store.insert_memory(memory(f"a long note that mentions one kiwi, number {i}"),
                                vec(0)) for i in range(4)]
    flt = MemoryFilter(workspaces=("",))
    got = store.keyword_memories("alice", "kiwi", 3, flt)
    assert len(got) == 3 and {m.id for m, _ in got} <= {m.id for m in mine}
    assert got[0][1] == pytest.approx(1.0)
    everywhere = store.keyword_memories("alice", "kiwi", 3, MemoryFilter())
    assert all(m.workspace == "other" for m, _ in everywhere)


def test_tags_entities_vectors_and_access(store: Store) -> None:
    a = store.insert_memory(memory("x", tags=("work",), entities=("python", "django")), vec(0))
    b = store.insert_memory(memory("y", entities=("rust",)), vec(1))
    assert [m.id for m in store.list_memories("alice", MemoryFilter(tags=("work",)))] == [a.id]
    assert [m.id for m in store.memories_by_entities("alice", ["django"], 5, MemoryFilter())] \
        == [a.id]
    vecs = store.get_memory_vectors("alice", [a.id, b.id])
    assert np.allclose(vecs[b.id], vec(1))
    store.record_access("alice", [(a.id, 0.5), (a.id, 0.25)], now=99.0)
    got = store.get_memory("alice", a.id)
    assert got is not None and got.access_count == 2 and got.last_accessed_at == 99.0
    assert got.relevance_accumulator == pytest.approx(0.75)
    assert store.max_access_count("alice") == 2
    # A gathered hit stands for several accesses, its relevance summed.
    store.record_access("alice", [(a.id, 1.5, 3), (b.id, 0.25)], now=100.0)
    got, other = store.get_memory("alice", a.id), store.get_memory("alice", b.id)
    assert got is not None and got.access_count == 5 and got.last_accessed_at == 100.0
    assert got.relevance_accumulator == pytest.approx(2.25)
    assert other is not None and other.access_count == 1
    assert store.max_access_count("alice") == 5
    assert store.memory_users() == ["alice"]


def test_vectors_loaded_ahead_answer_as_cold_ones(
        store: Store, reopen: Callable[[], Any]) -> None:
    """Loading a user's vectors ahead of their first search (``memd serve`` does it at
    start) changes no answer, of the memory search or of the message search; a store
    whose searches run in the database loads nothing."""
    rng = np.random.default_rng(3)  # no two scores tie: one order on every backend
    vecs = rng.normal(size=(8, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    for i in range(5):
        store.insert_memory(memory(f"note {i}", workspace="w" if i % 2 else None), vecs[i])
    s = store.create_session(session())
    said = store.append_messages("alice", s.id, [NewMessage("user", "one"),
                                                 NewMessage("user", "two")], [1, 1],
                                 [None, None], 1.0)
    store.set_message_embeddings("alice", [(said[0].id, vecs[5]), (said[1].id, vecs[6])])
    query, flt = vecs[7], MemoryFilter(workspaces=("",))

    def answers(st: Store) -> tuple[list[Any], list[Any], list[Any]]:
        every = [(m.id, round(x, 5)) for m, x in st.nearest_memories("alice", query, 3,
                                                                     MemoryFilter())]
        mine = [(m.id, round(x, 5)) for m, x in st.nearest_memories("alice", query, 3, flt)]
        said = [(m.id, round(x, 5)) for m, x in st.nearest_messages("alice", query, 2)]
        return every, mine, said

    cold = answers(reopen())
    assert len(cold[0]) == 3 and len(cold[1]) == 3 and len(cold[2]) == 2
    warmed = reopen()
    held = warmed.warm_vectors("alice")
    assert held in (0, 7)  # 0: nothing in memory (PostgreSQL); else 5 memories, 2 messages
    assert answers(warmed) == cold
    assert warmed.warm_vectors("nobody") == 0


def test_recent_messages_stop_at_the_message_that_crosses_the_budget(store: Store) -> None:
    sess = store.create_session(session())
    counts = [5, 7, -3, 11, 2, 4, 6, 9]  # a negative count counts as 0
    stored = store.append_messages(
        "alice", sess.id, [NewMessage("user", f"m{i}") for i in range(len(counts))], counts,
        [None] * len(counts), 1.0)
    store.mark_compressed("alice", sess.id, [stored[5].id], "summary-1")
    turns = [m.turn_index for m in stored]

    def recent(budget: int, **kw: Any) -> list[int]:
        return [m.turn_index for m in store.recent_messages("alice", sess.id, budget, **kw)]

    active = [t for t in turns[::-1] if t != turns[5]]  # newest first, compressed left out
    # newer-than sums, newest first: 9->0, 6->9, (4 compressed), 2->15, 11->17, -3->28,
    # 7->28, 5->35
    assert recent(0) == active[:1]
    assert recent(15) == active[:3]
    assert recent(16) == active[:3] and recent(17) == active[:4]
    assert recent(28) == active[:6]
    assert recent(10_000) == active
    assert recent(10_000, limit=3) == active[:3]
    assert recent(10_000, before_turn=turns[4]) == [t for t in active if t < turns[4]]
    assert store.recent_messages("alice", "no-such-session", 100) == []
    assert store.recent_messages("bob", sess.id, 100) == []


def test_memory_candidates_agree_with_the_single_channel_composition(store: Store) -> None:
    from memd.backends.base import compose_candidates

    texts = ["alpha rust compiler", "beta python asyncio", "gamma rust borrow checker",
             "delta tea", "epsilon coffee python", "zeta rust", "eta nothing", "theta misc"]
    made = []
    for i, text in enumerate(texts):
        m = store.insert_memory(memory(
            text, entities=("rust",) if "rust" in text else (), importance=0.1 * i,
            scope=Scope.LOCAL if i == 6 else Scope.GLOBAL,
            session_id="s1" if i == 6 else None, tier=Tier.WORKING if i == 7 else Tier.SEMANTIC,
        ), vec(i % DIM) if i != 5 else None)  # "zeta rust" has no vector yet
        made.append(m)
    store.insert_memory(memory("rust for bob", user="bob"), vec(0))
    store.record_access("alice", [(made[3].id, 0.5), (made[3].id, 0.5), (made[1].id, 0.2)],
                        now=50.0)
    q = vec(0, 2)
    for flt in (MemoryFilter(now=20.0), MemoryFilter(now=20.0, session_id="s2"),
                MemoryFilter(tiers=(Tier.SEMANTIC,))):
        kw: dict[str, Any] = dict(knn_k=3, keyword_k=3, entities=["rust"], entity_k=2,
                                  frequent_k=2)
        got = store.memory_candidates("alice", "rust python", q, flt, **kw)
        want = compose_candidates(store, "alice", "rust python", q, flt, **kw)
        assert got.keys() == want.keys() and got
        for mid, f in got.items():
            w = want[mid]
            assert f.memory == w.memory and f.entity == w.entity
            assert f.similarity == pytest.approx(w.similarity, abs=1e-6)
            assert f.keyword == pytest.approx(w.keyword, abs=1e-6)
        assert all(f.memory.user_id == "alice" for f in got.values())
        assert made[3].id in got and got[made[3].id].memory.access_count == 2  # frequent
        if flt.session_id == "s2":
            assert made[6].id not in got  # another session's local memory
    only_knn = store.memory_candidates("alice", "", q, MemoryFilter(), knn_k=2, keyword_k=5)
    assert len(only_knn) == 2 and all(f.keyword == 0.0 for f in only_knn.values())


def test_read_batch_groups_reads_and_keeps_its_writes(store: Store) -> None:
    sess = store.create_session(session())
    assert not store.in_transaction()
    with store.read_batch():
        assert not store.in_transaction()  # a batch is not a transaction of the caller's
        assert store.get_session("alice", sess.id) is not None
        job = store.enqueue_job("access", {"hits": []}, "alice", 1.0)
    assert job in {j.id for j in store.claim_jobs(2.0, 10)}
    with store.transaction():
        assert store.in_transaction()
        store.append_messages("alice", sess.id, [NewMessage("user", "hi")], [1], [None], 1.0)
        with store.read_batch():  # joins: sees the transaction's own writes
            assert [m.content for m in store.get_messages("alice", sess.id)] == ["hi"]
    assert not store.in_transaction()


def test_delete_removes_every_derived_copy(store: Store) -> None:
    from memd.models.embedder import text_hash  # the cache's key: the embedded text's

    m = store.insert_memory(memory("secret plan zebra", entities=("zebra",)), vec(0))
    store.put_cached_embeddings("model", [(text_hash(m.text), vec(0).tobytes())])
    assert store.delete_memory("alice", m.id)
    assert store.get_memory("alice", m.id) is None
    assert store.nearest_memories("alice", vec(0), 5, MemoryFilter()) == []
    assert store.keyword_memories("alice", "zebra", 5, MemoryFilter()) == []
    assert store.memories_by_entities("alice", ["zebra"], 5, MemoryFilter()) == []
    assert store.get_cached_embeddings("model", [text_hash(m.text)]) == {}
    assert not store.delete_memory("alice", m.id)


# -- facts, usage, jobs, cache --------------------------------------------------------
def test_one_active_fact_per_key(store: Store) -> None:
    alex = store.insert_fact(fact("Alex"))
    with pytest.raises(Conflict):
        store.insert_fact(fact("Sam"))
    store.insert_fact(fact("Alex in projA", workspace="projA"))
    sam = fact("Sam")
    store.supersede_fact("alice", alex.id, sam.id, 2.0)
    store.insert_fact(sam)
    active = store.get_facts("alice", workspaces=("",))
    assert [f.value for f in active] == ["Sam"]
    history = store.get_facts("alice", workspaces=("",), active_only=False)
    old = next(f for f in history if f.id == alex.id)
    assert not old.is_active and old.superseded_by == sam.id
    assert store.get_facts("bob") == []


def test_delete_facts_deletes_only_the_users_named_facts(store: Store) -> None:
    alex = store.insert_fact(fact("Alex"))
    other = store.insert_fact(fact("Alex in projA", workspace="projA"))
    assert store.delete_facts("bob", [alex.id]) == 0  # not bob's
    assert store.delete_facts("alice", []) == 0
    assert store.delete_facts("alice", [alex.id, "no-such-fact"]) == 1
    left = store.get_facts("alice", active_only=False)
    assert [f.id for f in left] == [other.id]


def test_forgotten_digests_are_per_user_and_kept_once(store: Store) -> None:
    assert store.forgotten("alice", ["d1", "d2"]) == set()
    store.add_forgotten("alice", ["d1", "d1", "d3"], 5.0)
    store.add_forgotten("alice", ["d1"], 6.0)  # already there: kept, no error
    store.add_forgotten("alice", [], 7.0)
    assert store.forgotten("alice", ["d1", "d2", "d3"]) == {"d1", "d3"}
    assert store.forgotten("bob", ["d1", "d3"]) == set()
    assert store.forgotten("alice", []) == set()


def test_paragraphs_count_the_sessions_they_are_seen_in_per_user(store: Store) -> None:
    assert store.see_paragraphs("alice", "s1", "m1", [], 1.0) == []
    first = store.see_paragraphs("alice", "s1", "m1", ["p1", "p2", "p1"], 1.0)
    assert [(p.key, p.sessions, p.new_session) for p in first] == [("p1", 1, True),
                                                                   ("p2", 1, True)]
    again = store.see_paragraphs("alice", "s1", "m2", ["p1"], 2.0)  # same session
    assert [(p.sessions, p.new_session, p.first_message_id) for p in again] == [(1, False, "m1")]
    assert store.recurring_paragraphs("alice", ["p1", "p2"]) == set()
    other = store.see_paragraphs("alice", "s2", "m3", ["p1"], 3.0)
    assert [(p.first_session_id, p.first_message_id, p.sessions, p.new_session)
            for p in other] == [("s1", "m1", 2, True)]
    assert store.see_paragraphs("alice", "s2", "m4", ["p1"], 4.0)[0].new_session is False
    assert store.recurring_paragraphs("alice", ["p1", "p2", "p9"]) == {"p1"}
    assert store.recurring_paragraphs("alice", []) == set()
    assert store.recurring_paragraphs("bob", ["p1"]) == set()
    assert store.see_paragraphs("bob", "s9", "m9", ["p1"], 5.0)[0].sessions == 1


def test_a_response_names_its_session_per_user(store: Store) -> None:
    assert store.response_session("alice", "resp_1") is None
    store.link_response("alice", "resp_1", "s1", 1.0)
    store.link_response("alice", "resp_1", "s2", 2.0)  # linked already: keeps its session
    store.link_response("alice", "resp_2", "s2", 3.0)
    assert store.response_session("alice", "resp_1") == "s1"
    assert store.response_session("alice", "resp_2") == "s2"
    assert store.response_session("bob", "resp_1") is None
def _context_object(oid: str, user: str = "alice", sid: str = "s1",
                    key: str | None = "src/app.py") -> ContextObject:
    return ContextObject(
        object_id=oid, user_id=user, session_id=sid, content_hash="h-" + oid,
        object_type="file_context", source_tool="read", source_key=key,
        tool_call_id="tc-" + oid, turn_start=1, turn_end=1, content="line 1\nline 2",
        compact="[extractive] line 1", stub="[stub] " + oid, tokens_l0=10, tokens_l2=4,
        tokens_l3=3, created_at=1.0, updated_at=1.0, entities=("PORT_MAP", "lib/net.py"))


def test_context_objects_are_kept_once_per_session_with_their_transitions(
        store: Store) -> None:
    assert store.add_context_objects([]) == 0
    a, b = _context_object("o1"), _context_object("o2", key=None)
    assert store.add_context_objects([a, b, a]) == 2
    # a resent history brings the same objects again: nothing new, nothing changed
    assert store.add_context_objects([replace(a, content="changed"), b]) == 0
    assert store.add_context_objects([_context_object("o1", sid="s2")]) == 1
    got = store.context_objects("alice", "s1")
    assert [o.object_id for o in got] == ["o1", "o2"]
    assert got[0] == a and got[1].source_key is None and got[0].pinned is False
    assert store.context_objects("bob", "s1") == []
    store.apply_transitions("alice", "s1", [
        FidelityTransition("o1", 0, 3, "supersede", "warning", 900, "call-1"),
        FidelityTransition("o2", 0, 2, "pressure", "warning", 900, "call-1"),
    ], {"o1": "o2"}, 5.0)
    store.apply_transitions("alice", "s1", [
        FidelityTransition("o2", 2, 3, "pressure", "critical", 950, None)], {}, 6.0)
    store.apply_transitions("alice", "s1", [], {}, 7.0)
    held = {o.object_id: o for o in store.context_objects("alice", "s1")}
    assert (held["o1"].fidelity, held["o1"].superseded_by) == (3, "o2")
    assert (held["o2"].fidelity, held["o2"].updated_at) == (3, 6.0)
    assert store.context_objects("alice", "s2")[0].fidelity == 0
    steps = store.fidelity_transitions("alice", "s1")
    assert [(t.object_id, t.from_fidelity, t.to_fidelity, t.trigger, t.call_id,
             t.created_at) for t in steps] == [
        ("o1", 0, 3, "supersede", "call-1", 5.0), ("o2", 0, 2, "pressure", "call-1", 5.0),
        ("o2", 2, 3, "pressure", None, 6.0)]
    assert store.fidelity_transitions("alice", "s2") == []


def test_a_helpers_summaries_replace_an_objects_texts_only_while_it_is_whole(
        store: Store) -> None:
    a, b = _context_object("o1"), _context_object("o2")
    a = replace(a, detailed="[extractive] line 1 line 2", tokens_l1=6,
                losses={"compact": {"dropped": ["lines"], "answers": ["which file"]}})
    store.add_context_objects([a, b])
    assert store.context_objects("alice", "s1")[0] == a  # the new columns round-trip
    store.apply_transitions("alice", "s1", [
        FidelityTransition("o2", 0, 2, "pressure", "warning", 900, "call-1")], {}, 2.0)
    mine = ObjectSummaries("L1 by the helper", 4, "L2", 1, "smol",
                           {"detailed": {"dropped": ["x"], "answers": ["y"]},
                            "compact": {"dropped": ["z"], "answers": []}})
    assert store.set_object_summaries("alice", "s1", "o1", mine, 3.0)
    assert not store.set_object_summaries("alice", "s1", "o2", mine, 3.0)  # sent degraded
    assert not store.set_object_summaries("bob", "s1", "o1", mine, 3.0)
    got = {o.object_id: o for o in store.context_objects("alice", "s1")}
    assert (got["o1"].detailed, got["o1"].tokens_l1, got["o1"].compact, got["o1"].tokens_l2,
            got["o1"].summarized_by, got["o1"].losses, got["o1"].updated_at) == (
        "L1 by the helper", 4, "L2", 1, "smol", mine.losses, 3.0)
    assert got["o2"].compact == b.compact and got["o2"].summarized_by == "extractive"
    assert store.fidelity_transitions("bob", "s1") == []


def test_admissions_are_recorded_once_per_object(store: Store) -> None:
    first = AdmissionDecision("o1", "s1", 2, 0.3125, {"type": 0.3, "size": 0.5}, "call-1", 5.0)
    second = AdmissionDecision("o2", "s1", 0, 0.9, {"type": 1.0}, None, 6.0)
    store.add_admissions("alice", [second, first])
    store.add_admissions("alice", [replace(first, fidelity=0, score=1.0, created_at=7.0),
                                   replace(first, object_id="o3", session_id="s2")])
    store.add_admissions("alice", [])
    assert store.admissions("alice", "s1") == [first, second]  # the first decision stays
    assert [a.object_id for a in store.admissions("alice", "s2")] == ["o3"]
    assert store.admissions("bob", "s1") == []


def test_faults_are_recorded_per_user_and_session(store: Store) -> None:
    first = Fault("f-1", "s1", "query", "which port?", "port 8443", ("o1", "o2"), 120, 3,
                  4, "call-1", 5.0)
    second = Fault("f-2", "s1", "restore", "o2", "line 1\nline 2", ("o2",), 0, 1, 5,
                   None, 6.0)
    store.add_fault("alice", second)
    store.add_fault("alice", first)
    store.add_fault("alice", replace(first, fault_id="f-3", session_id="s2"))
    assert store.faults("alice", "s1") == [first, second]
    assert [f.fault_id for f in store.faults("alice", "s2")] == ["f-3"]
    assert store.faults("bob", "s1") == []


def test_a_store_no_migrate_copied_into_has_no_unfinished_copy(store: Store) -> None:
    assert store.unfinished_copy() == []


def test_usage_log(store: Store) -> None:
    store.record_usage(Usage(id="u1", user_id="alice", created_at=5.0, model="m",
                             prompt_tokens=10, completion_tokens=3, cost_microcents=7))
    (u,) = store.list_usage("alice")
    assert (u.prompt_tokens, u.completion_tokens, u.cost_microcents) == (10, 3, 7)
    assert store.list_usage("bob") == []


def test_jobs_lease_retry_and_dead(store: Store) -> None:
    j = store.enqueue_job("embed", {"ids": ["a"]}, "alice", now=10.0)
    later = store.enqueue_job("embed", {}, None, now=10.0, run_after=50.0)
    (claimed,) = store.claim_jobs(now=11.0, limit=10, lease_seconds=30)
    assert claimed.id == j and claimed.payload == {"ids": ["a"]} and claimed.attempts == 1
    assert store.claim_jobs(now=12.0, limit=10) == []  # leased
    (again,) = store.claim_jobs(now=45.0, limit=1)  # lease ran out: a crash loses nothing
    assert again.id == j and again.attempts == 2
    store.fail_job(j, "boom", retry_at=60.0)
    due = store.claim_jobs(now=55.0, limit=10)
    assert [x.id for x in due] == [later]
    store.complete_job(later)
    (retried,) = store.claim_jobs(now=61.0, limit=10)
    assert retried.last_error == "boom"
    store.fail_job(j, "dead now", retry_at=None)
    assert store.claim_jobs(now=1e9, limit=10) == []
    assert store.pending_jobs() == 0


def test_jobs_listed_by_state_and_dead_ones_retried(store: Store) -> None:
    a = store.enqueue_job("ingest", {"text": "x"}, "alice", now=10.0)
    b = store.enqueue_job("access", {"hits": []}, "bob", now=11.0)
    orphan = store.enqueue_job("embed", {}, None, now=12.0)
    assert [q.job.id for q in store.list_jobs("pending")] == [a, b, orphan]
    assert [q.job.id for q in store.list_jobs("pending", limit=1)] == [a]
    (pending,) = store.list_jobs("pending", user_id="alice")
    assert (pending.state, pending.job.kind, pending.job.attempts) == ("pending", "ingest", 0)
    assert pending.updated_at == pending.job.created_at == 10.0
    assert {j.id for j in store.claim_jobs(now=20.0, limit=2)} == {a, b}
    store.fail_job(a, "RuntimeError: boom", retry_at=None)
    store.fail_job(b, "KeyError: 'x'", retry_at=None)
    (dead,) = store.list_jobs("dead", user_id="alice")
    assert (dead.job.id, dead.state, dead.job.attempts, dead.job.last_error,
            dead.job.user_id, dead.updated_at) == (a, "dead", 1, "RuntimeError: boom",
                                                   "alice", 20.0)
    assert [q.job.id for q in store.list_jobs("dead")] == [a, b]
    assert [q.job.id for q in store.list_jobs("pending")] == [orphan]
    got = store.get_job(a)
    assert got is not None and got.state == "dead" and got.job.payload == {"text": "x"}
    assert store.get_job("nope") is None
    assert store.retry_dead_jobs(30.0, user_id="carol") == 0
    assert store.retry_dead_jobs(30.0, job_id=orphan) == 0  # pending, not dead
    assert store.retry_dead_jobs(30.0, user_id="alice", job_id=a) == 1
    again = store.get_job(a)
    assert again is not None and (again.state, again.job.attempts, again.updated_at) == (
        "pending", 0, 30.0)
    assert store.retry_dead_jobs(31.0) == 1  # bob's, the last dead one
    assert store.list_jobs("dead") == [] and store.pending_jobs() == 3
    assert {j.id for j in store.claim_jobs(now=31.0, limit=10)} == {a, b, orphan}
    assert store.complete_job(a) is True
    assert store.complete_job(a) is False  # done already: a second run sees it gone


def test_embedding_cache(store: Store) -> None:
    store.put_cached_embeddings("m", [("h1", b"\x00\x01"), ("h2", b"\x02")])
    store.put_cached_embeddings("m", [("h1", b"ignored")])
    assert store.get_cached_embeddings("m", ["h1", "h2", "h3"]) == {"h1": b"\x00\x01",
                                                                    "h2": b"\x02"}
    assert store.get_cached_embeddings("other", ["h1"]) == {}


def test_sessions_expire_and_working_memory_clears(store: Store) -> None:
    s = store.create_session(session(expires_at=50.0))
    store.insert_memory(memory("scratch", tier=Tier.WORKING, scope=Scope.LOCAL,
                               session_id=s.id), vec(0))
    keep = store.insert_memory(memory("keep", session_id=s.id), vec(1))
    assert store.expire_sessions(now=100.0) == 1
    assert store.delete_session_working_memory("alice", s.id) == 1
    assert [m.id for m in store.list_memories("alice", MemoryFilter())] == [keep.id]


def test_an_append_moves_the_session_expiry_and_users_are_listed(store: Store) -> None:
    s = store.create_session(session(expires_at=50.0))
    store.create_session(session("bob"))
    store.append_messages("alice", s.id, [NewMessage("user", "hi")], [1], [None], 40.0,
                          expires_at=90.0)
    assert store.get_session("alice", s.id).expires_at == 90.0  # type: ignore[union-attr]
    store.append_messages("alice", s.id, [NewMessage("user", "again")], [1], [None], 41.0)
    assert store.get_session("alice", s.id).expires_at == 90.0  # type: ignore[union-attr]
    assert store.expire_sessions(now=60.0) == 0
    assert store.session_users() == ["alice", "bob"]


def test_retention_deletes_inactive_sessions_messages_and_their_index_rows(
    store: Store,
) -> None:
    old, live = store.create_session(session()), store.create_session(session())
    theirs = store.create_session(session("bob"))
    gone = store.append_messages("alice", old.id, [NewMessage("user", "kubernetes rollout"),
                                                   NewMessage("user", "pizza")],
                                 [1, 1], [None, None], 10.0)
    store.append_messages("alice", live.id, [NewMessage("user", "kubernetes again")], [1],
                          [None], 10.0)
    late = store.append_messages("alice", live.id, [NewMessage("user", "later")], [1],
                                 [None], 30.0)
    store.append_messages("bob", theirs.id, [NewMessage("user", "kubernetes bob")], [1],
                          [None], 10.0)
    store.set_message_embeddings("alice", [(gone[0].id, vec(0)), (late[0].id, vec(1))])
    mem = store.insert_memory(memory("uses kubernetes"), vec(0))
    assert store.delete_inactive_messages("alice", before=10.0) == (0, 0)
    assert store.delete_inactive_messages("alice", before=20.0) == (2, 1)
    assert store.get_messages("alice", old.id) == []
    assert [m.content for m in store.get_messages("alice", live.id)] == [
        "kubernetes again", "later"]
    assert [m.content for m, _ in store.keyword_messages("alice", "kubernetes", 5)] == [
        "kubernetes again"]
    assert [m.id for m, _ in store.nearest_messages("alice", vec(0), 5)] == [late[0].id]
    assert store.get_session("alice", old.id).history_version == 1  # type: ignore[union-attr]
    assert len(store.get_messages("bob", theirs.id)) == 1
    assert store.get_memory("alice", mem.id) is not None
    assert store.delete_inactive_messages("alice", before=20.0) == (0, 0)


def test_a_job_enqueued_once_per_id_and_rescheduled_by_its_claim(store: Store) -> None:
    assert store.enqueue_job_once("schedule-x", "schedule", {"task": "x"}, None, now=10.0)
    assert not store.enqueue_job_once("schedule-x", "schedule", {}, None, now=11.0)
    assert store.pending_jobs() == 0  # a recurring job is the schedule, not work waiting
    (claimed,) = store.claim_jobs(now=12.0, limit=5)
    assert claimed.id == "schedule-x" and claimed.payload == {"task": "x"}
    assert not store.reschedule_job("schedule-x", claimed.attempts + 1, 50.0, {}, 12.0)
    assert store.reschedule_job("schedule-x", claimed.attempts, 50.0, {"task": "y"}, 12.0)
    found = store.get_job("schedule-x")
    assert found is not None and found.state == "pending"
    assert (found.job.run_after, found.job.attempts, found.job.payload) == (
        50.0, 0, {"task": "y"})
    assert store.claim_jobs(now=49.0, limit=5) == []
    assert store.ensure_history_partitions(12.0, months=1) >= 0


# -- transactions ---------------------------------------------------------------------
def test_a_failed_write_undoes_only_itself_inside_a_transaction(store: Store) -> None:
    """A Conflict handled inside ``with store.transaction():`` leaves the transaction
    usable (SQLite: statement atomicity; PostgreSQL: each write runs in a savepoint), and
    an exception out of the outer block rolls every write back."""
    with store.transaction():
        store.insert_fact(fact("Alex"))
        with pytest.raises(Conflict):
            store.insert_fact(fact("Sam"))
        store.record_usage(Usage(id="u1", user_id="alice", created_at=1.0))
    assert [f.value for f in store.get_facts("alice")] == ["Alex"]
    assert len(store.list_usage("alice")) == 1
    with pytest.raises(RuntimeError), store.transaction():
        with store.transaction():
            store.record_usage(Usage(id="u2", user_id="alice", created_at=2.0))
        raise RuntimeError("roll back")
    assert [u.id for u in store.list_usage("alice")] == ["u1"]


# -- calls: what the proxy recorded ------------------------------------------------------
def test_calls_list_newest_first_shaped_as_get_call(store: Store) -> None:
    record_calls(store)
    store.finish_call("c2", 502, {"error": "upstream down"})
    listed = store.list_calls("alice")
    assert call_ids(listed) == ["c5", "c4", "c3", "c2", "c1"]  # the tie: higher call id first
    assert listed == [store.get_call("alice", c["id"]) for c in listed]
    c2 = listed[3]
    assert c2 == {"id": "c2", "user_id": "alice", "session_id": "s2", "workspace": "proj",
                  "model": "gpt-x", "created_at": 200.0, "status": 502,
                  "report": {"tokens": {"memory": 200}},
                  "metadata": {"error": "upstream down"}}
    assert listed[0]["workspace"] is None and listed[0]["status"] is None
    assert call_ids(store.list_calls("bob")) == ["b1"]
    assert store.list_calls("carol") == []


def test_calls_list_filters_and_limit(store: Store) -> None:
    record_calls(store)
    assert call_ids(store.list_calls("alice", session_id="s1")) == ["c5", "c3", "c1"]
    assert call_ids(store.list_calls("alice", since=200.0)) == ["c5", "c4", "c3", "c2"]
    assert call_ids(store.list_calls("alice", until=300.0)) == ["c2", "c1"]
    assert call_ids(store.list_calls("alice", since=150.0, until=350.0)) == ["c4", "c3", "c2"]
    assert call_ids(store.list_calls("alice", workspace="proj")) == ["c3", "c2"]
    assert store.list_calls("alice", workspace="other") == []
    assert call_ids(store.list_calls("alice", session_id="s1", workspace="proj",
                                 since=300.0)) == ["c3"]
    assert call_ids(store.list_calls("alice", limit=2)) == ["c5", "c4"]
    assert call_ids(store.list_calls("alice", session_id="s1", limit=1)) == ["c5"]
    assert store.list_calls("bob", session_id="s2") == []


# -- what the tests above leave out ------------------------------------------------------
def test_close_then_reopen_keeps_what_was_committed(store: Store,
                                                    reopen: Callable[[], Any]) -> None:
    sess = store.create_session(session("alice", "s-kept"))
    store.append_messages("alice", sess.id, [NewMessage("user", "the pelican brief")], [3],
                          [None], 2.0)
    kept = store.insert_memory(memory("durable pelican notes"), vec(2))
    with store.transaction():
        store.insert_fact(fact("Alex"))
    version = store.schema_version()
    store.close()
    again = reopen()
    assert again.schema_version() == version
    assert again.get_session("alice", sess.id).turn_count == 1  # type: ignore[union-attr]
    assert [m.content for m in again.get_messages("alice", sess.id)] == ["the pelican brief"]
    assert again.get_memory("alice", kept.id) == kept
    near = again.nearest_memories("alice", vec(2), 1, MemoryFilter())
    assert [m.id for m, _ in near] == [kept.id] and near[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [m.id for m, _ in again.keyword_memories("alice", "pelican", 5, MemoryFilter())] \
        == [kept.id]
    assert [f.value for f in again.get_facts("alice")] == ["Alex"]


def test_side_reads_read_what_is_committed_while_the_caller_holds_a_read_batch(
    store: Store,
) -> None:
    """A worker thread's side reads see committed rows and finish while the thread that
    waits for it is inside a read batch (as a compile waits for its worker); the worker
    reads as usual after them."""
    sess = store.create_session(session())
    store.append_messages("alice", sess.id, [NewMessage("user", "hello side")], [2], [None],
                          1.0)
    got: dict[str, Any] = {}

    def worker() -> None:
        with store.side_reads():
            got["turns"] = store.get_session("alice", sess.id).turn_count  # type: ignore[union-attr]
            with store.side_reads():  # nested: still side reads
                got["content"] = [m.content for m in store.get_messages("alice", sess.id)]
            got["missing"] = store.get_session("bob", sess.id)
        got["after"] = [m.content for m in store.recent_messages("alice", sess.id, 100)]

    with store.read_batch():
        assert store.get_session("alice", sess.id) is not None
        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), "side reads waited for the caller's read batch"
    assert got == {"turns": 1, "content": ["hello side"], "missing": None,
                   "after": ["hello side"]}


def test_session_usage_adds_up_per_session(store: Store) -> None:
    a = store.create_session(session())
    b = store.create_session(session())
    store.add_session_usage("alice", a.id, 100, 20, 7, now=5.0)
    store.add_session_usage("alice", a.id, 50, 5, 3, now=6.0)
    store.add_session_usage("bob", b.id, 999, 999, 999, now=7.0)  # not bob's: no effect
    got, other = store.get_session("alice", a.id), store.get_session("alice", b.id)
    assert got is not None and other is not None
    assert (got.total_prompt_tokens, got.total_completion_tokens,
            got.total_cost_microcents, got.updated_at) == (150, 25, 10, 6.0)
    assert (other.total_prompt_tokens, other.total_completion_tokens,
            other.total_cost_microcents, other.updated_at) == (0, 0, 0, 1.0)
    assert got.turn_count == 0  # usage moves no turn counter


def test_system_prompts_are_stored_once_by_hash(store: Store) -> None:
    text = "You are a terse assistant."
    h = hashlib.sha256(text.encode()).hexdigest()
    assert store.get_system_prompt(h) is None
    store.register_system_prompt(h, text, 6)
    store.register_system_prompt(h, "a different text under the same hash", 9)
    assert store.get_system_prompt(h) == text
    store.register_system_prompt("other", "Another prompt, émoji 🚀", 4)
    assert store.get_system_prompt("other") == "Another prompt, émoji 🚀"
    assert store.get_system_prompt(h) == text


def test_messages_by_id_and_by_chain_hash(store: Store) -> None:
    s = store.create_session(session())
    t = store.create_session(session())
    first = store.append_messages("alice", s.id, [NewMessage("user", "one"),
                                                  NewMessage("assistant", "two")],
                                  [1, 1], ["h1", "h2"], 1.0, chain_hashes=["c1", "c2"])
    other = store.append_messages("alice", t.id, [NewMessage("user", "three")], [1], [None],
                                  2.0, chain_hashes=[None])
    bobs = store.create_session(session("bob"))
    store.append_messages("bob", bobs.id, [NewMessage("user", "bob's")], [1], [None], 1.0,
                          chain_hashes=["c1"])
    got = store.get_message("alice", first[1].id)
    assert got is not None and got == first[1]
    assert (got.content, got.session_id, got.turn_index, got.content_hash, got.chain_hash) \
        == ("two", s.id, 2, "h2", "c2")
    assert store.get_message("alice", other[0].id).chain_hash is None  # type: ignore[union-attr]
    assert store.get_message("bob", first[0].id) is None
    assert store.get_message("alice", "no-such-message") is None
    found = store.find_chain("alice", ["c2", "c1", "c1", "nope"])
    assert sorted((m.chain_hash, m.id) for m in found) == [("c1", first[0].id),
                                                           ("c2", first[1].id)]
    assert [m.content for m in store.find_chain("bob", ["c1", "c2"])] == ["bob's"]
    assert store.find_chain("alice", []) == []
    # by place: (session, turn); bob's session id names none of alice's messages
    places = [(s.id, 2), (t.id, 1), (s.id, 1), (s.id, 3), (bobs.id, 1), (s.id, 2)]
    assert sorted(m.id for m in store.messages_at("alice", places)) == sorted(
        [first[0].id, first[1].id, other[0].id])
    assert store.messages_at("alice", []) == []
    assert [m.content for m in store.messages_at("bob", places)] == ["bob's"]
    many = [(s.id, i) for i in range(-150, 150)]  # more than one statement's worth
    assert {m.id for m in store.messages_at("alice", many)} == {first[0].id, first[1].id}
    assert store.find_chain("carol", ["c1"]) == []


def test_linked_entities_find_their_memory_once(store: Store) -> None:
    a = store.insert_memory(memory("plain note", importance=0.9), vec(0))
    b = store.insert_memory(memory("another note", importance=0.1), vec(1))
    flt = MemoryFilter()
    assert store.memories_by_entities("alice", ["kafka"], 5, flt) == []
    store.link_entities("alice", a.id, ["kafka", "kafka", "zookeeper"])
    store.link_entities("alice", a.id, ["kafka"])  # again: no second link
    store.link_entities("alice", b.id, ["zookeeper"])
    assert [m.id for m in store.memories_by_entities("alice", ["kafka"], 5, flt)] == [a.id]
    both = store.memories_by_entities("alice", ["kafka", "zookeeper"], 5, flt)
    assert [m.id for m in both] == [a.id, b.id]  # each once, the more important first
    assert [m.id for m in store.memories_by_entities("alice", ["kafka", "zookeeper"], 1,
                                                     flt)] == [a.id]
    assert store.memories_by_entities("bob", ["kafka"], 5, flt) == []


def test_iter_memories_yields_each_memory_once_in_pages(store: Store) -> None:
    with store.transaction():  # more than one page of 500
        mine = [store.insert_memory(memory(f"note {i}"), None) for i in range(520)]
        gone = store.insert_memory(memory("inactive", is_active=False), vec(0))
        bobs = [store.insert_memory(memory(f"bob {i}", user="bob"), vec(1)) for i in range(3)]
    alice = Counter(m.id for m in store.iter_memories("alice"))
    assert set(alice) == {m.id for m in mine} | {gone.id}
    assert set(alice.values()) == {1}
    every = Counter(m.id for m in store.iter_memories())
    assert set(every) == set(alice) | {m.id for m in bobs} and set(every.values()) == {1}
    got = next(m for m in store.iter_memories("bob") if m.id == bobs[0].id)
    assert got == bobs[0]
    assert list(store.iter_memories("carol")) == []


# -- accounts ------------------------------------------------------------------------
def test_users_are_created_once_and_listed_by_id(store: Store) -> None:
    assert store.list_users() == []
    bob = store.create_user("bob", "Bob B.", 2.0)
    alice = store.create_user("alice", "Alice A.", 3.0)
    assert (alice.id, alice.name, alice.created_at) == ("alice", "Alice A.", 3.0)
    with pytest.raises(Conflict):
        store.create_user("alice", "Another Alice", 4.0)
    assert store.get_user("alice") == alice and store.get_user("bob") == bob
    assert store.get_user("carol") is None
    assert store.list_users() == [alice, bob]


def test_api_keys_identify_their_user_until_revoked(store: Store) -> None:
    store.create_user("alice", "Alice", 1.0)
    store.create_user("bob", "Bob", 1.0)
    with pytest.raises(NotFound):
        store.add_api_key("k0", "carol", "hash-0", "laptop", 2.0)
    k1 = store.add_api_key("k1", "alice", "hash-1", "laptop", 2.0)
    store.add_api_key("k2", "bob", "hash-2", "ci", 3.0)
    store.add_api_key("k3", "alice", "hash-3", "phone", 4.0)
    assert (k1.id, k1.user_id, k1.label, k1.created_at) == ("k1", "alice", "laptop", 2.0)
    assert store.api_key_user("hash-1", 100.0) == "alice"
    assert store.api_key_user("hash-2", 100.0) == "bob"
    assert store.api_key_user("no-such-hash", 100.0) is None
    keys = {k.id: k for k in store.list_api_keys()}
    assert [k.id for k in store.list_api_keys()] == ["k1", "k3", "k2"]  # by user, then age
    assert keys["k1"].last_used_at == 100.0 and keys["k3"].last_used_at is None
    store.api_key_user("hash-1", 130.0)  # used again within the minute: not rewritten
    store.api_key_user("hash-2", 200.0)  # past it: recorded
    keys = {k.id: k for k in store.list_api_keys()}
    assert keys["k1"].last_used_at == 100.0 and keys["k2"].last_used_at == 200.0
    assert [k.id for k in store.list_api_keys("alice")] == ["k1", "k3"]
    assert store.list_api_keys("carol") == []
    assert store.revoke_api_key("k1", 300.0)
    assert not store.revoke_api_key("k1", 301.0)  # already revoked
    assert not store.revoke_api_key("no-such-key", 301.0)
    assert store.api_key_user("hash-1", 400.0) is None
    assert store.api_key_user("hash-3", 400.0) == "alice"
    (revoked,) = [k for k in store.list_api_keys("alice") if k.id == "k1"]
    assert revoked.revoked_at == 300.0


def test_workspace_members_are_added_once_and_removed(store: Store) -> None:
    for user in ("alice", "bob", "carol"):
        store.create_user(user, user.title(), 1.0)
    assert store.workspace_members("team") == []
    with pytest.raises(NotFound):
        store.add_workspace_member("team", "dave", 2.0)
    assert store.add_workspace_member("team", "bob", 2.0)
    assert store.add_workspace_member("team", "alice", 2.0)
    assert not store.add_workspace_member("team", "alice", 3.0)  # already a member
    assert store.add_workspace_member("other", "carol", 2.0)
    assert store.workspace_members("team") == ["alice", "bob"]
    assert store.workspace_members("other") == ["carol"]
    assert store.remove_workspace_member("team", "bob")
    assert not store.remove_workspace_member("team", "bob")
    assert not store.remove_workspace_member("team", "carol")  # never was one
    assert store.workspace_members("team") == ["alice"]
    assert store.workspace_members("nowhere") == []


def test_a_store_that_passes_the_row_security_check_serves_its_acting_user(
    store: Store,
) -> None:
    """The check authenticated mode runs at start-up passes on a freshly migrated store
    (as often as it is run), and a request acting as a user then reads and writes that
    user's rows: what the check vouches for does not shut the user out of their own."""
    from memd.auth import acting_as

    for _ in range(2):
        assert store.check_row_security() is None
    store.create_user("alice", "Alice", 1.0)
    with acting_as("alice"):
        sess = store.create_session(session())
        store.append_messages("alice", sess.id, [NewMessage("user", "acting notes")], [2],
                              [None], 2.0)
        made = store.insert_memory(memory("acting rust notes"), vec(1))
        with store.read_batch():
            assert [m.content for m in store.get_messages("alice", sess.id)] \
                == ["acting notes"]
            found = store.memory_candidates("alice", "rust", vec(1), MemoryFilter(),
                                            knn_k=5, keyword_k=5)
        assert set(found) == {made.id} and found[made.id].keyword > 0
        assert store.get_session("alice", sess.id).turn_count == 1  # type: ignore[union-attr]


# -- erasure -------------------------------------------------------------------------
def _everything_of(store: Store, user: str, prompt: str) -> dict[str, str]:
    """Give ``user`` a row in every table (the ids of some), for the erasure tests."""
    store.create_user(user, user.title(), 1.0)
    store.add_api_key(f"key-{user}", user, f"hash-{user}", "", 1.0)
    store.add_workspace_member("team", user, 1.0)
    store.register_system_prompt(f"p-{user}", prompt, 3)
    store.register_system_prompt("p-shared", "A prompt both users' sessions use", 3)
    s = store.create_session(session(user, system_prompt_hash=f"p-{user}"))
    t = store.create_session(session(user, system_prompt_hash="p-shared"))
    said = store.append_messages(user, s.id, [NewMessage("user", f"{user} said this")],
                                 [3], [None], 2.0)
    store.append_messages(user, t.id, [NewMessage("user", f"{user} kept this")], [3],
                          [None], 2.0)
    store.set_message_embeddings(user, [(said[0].id, vec(2))])
    made = store.insert_memory(memory(f"{user} lives in Lisbon", user=user, session_id=s.id,
                                      entities=("lisbon",)), vec(0))
    kept = store.insert_memory(memory(f"{user} likes tea", user=user, entities=("tea",)),
                               vec(1))
    store.insert_fact(fact("Lisbon", user_id=user, source_message_id=said[0].id))
    store.insert_fact(fact("tea", user_id=user, key="drink"))
    store.add_forgotten(user, ["d1"], 3.0)
    store.see_paragraphs(user, s.id, said[0].id, ["p1"], 3.0)
    store.see_paragraphs(user, t.id, f"other-{user}", ["p2"], 3.0)
    store.link_response(user, f"resp-{user}", s.id, 3.0)
    store.link_response(user, f"resp2-{user}", t.id, 3.0)
    job = store.enqueue_job("ingest", {"session_id": s.id, "text": "x"}, user, 3.0)
    store.fail_job(job, "planted", None)
    store.enqueue_job("access", {"hits": []}, user, 3.0)
    store.record_call(f"call-{user}", user, s.id, None, "m", 3.0, {})
    store.record_call(f"call2-{user}", user, t.id, None, "m", 3.0, {})
    store.record_usage(Usage(id=f"u-{user}", user_id=user, session_id=s.id, created_at=3.0))
    store.put_cached_embeddings("m", [(f"h-{user}", b"\x01")])
    for sid in (s.id, t.id):
        store.add_context_objects([_context_object(f"ctx-{sid}", user, sid)])
        store.apply_transitions(user, sid, [FidelityTransition(
            f"ctx-{sid}", 0, 3, "pressure", "warning", 10)], {}, 3.0)
    return {"session": s.id, "kept_session": t.id, "memory": made.id, "kept": kept.id}


def test_erase_user_removes_every_row_of_the_user_and_no_other(store: Store) -> None:
    mine = _everything_of(store, "alice", "Alice's own prompt")
    bobs = _everything_of(store, "bob", "Bob's own prompt")
    counts = store.erase_user("alice", ["h-alice"])
    assert counts["memories"] == 2 and counts["messages"] == 2 and counts["sessions"] == 2
    assert (counts["facts"], counts["jobs"], counts["calls"], counts["usage_log"]) \
        == (2, 2, 2, 1)
    assert (counts["users"], counts["api_keys"], counts["workspace_members"]) == (1, 1, 1)
    assert (counts["forgotten"], counts["memory_entities"], counts["embedding_cache"]) \
        == (1, 2, 1)
    assert counts["paragraphs_seen"] == 2 and counts["response_sessions"] == 2
    assert counts["paragraphs_seen"] == 2
    assert counts["context_objects"] == counts["fidelity_transitions"] == 2
    assert counts["system_prompts"] == 1  # the shared one stays: bob's session uses it
    store.scrub()
    assert store.get_session("alice", mine["session"]) is None
    assert store.list_sessions("alice") == [] and store.iter_memories("alice") is not None
    assert list(store.iter_memories("alice")) == []
    assert store.get_facts("alice", active_only=False) == []
    assert store.forgotten("alice", ["d1"]) == set()
    assert store.response_session("alice", "resp-alice") is None
    assert store.response_session("bob", "resp-bob") == bobs["session"]
    assert store.list_jobs("dead", "alice") == store.list_jobs("pending", "alice") == []
    assert store.list_calls("alice") == [] and store.list_usage("alice") == []
    assert store.get_user("alice") is None and store.list_api_keys("alice") == []
    assert store.workspace_members("team") == ["bob"]
    assert store.get_system_prompt("p-alice") is None
    assert store.get_system_prompt("p-shared") is not None
    assert store.get_cached_embeddings("m", ["h-alice", "h-bob"]) == {"h-bob": b"\x01"}
    assert store.keyword_messages("alice", "said", 5) == []
    assert store.nearest_memories("alice", vec(0), 5, MemoryFilter()) == []
    # bob is untouched
    assert len(list(store.iter_memories("bob"))) == 2 and len(store.list_sessions("bob")) == 2
    assert [m.content for m, _ in store.keyword_messages("bob", "said", 5)] == ["bob said this"]
    assert [m.id for m, _ in store.nearest_memories("bob", vec(0), 1, MemoryFilter())] \
        == [bobs["memory"]]
    assert len(store.get_facts("bob", active_only=False)) == 2
    assert store.get_user("bob") is not None and store.get_system_prompt("p-bob")
    assert len(store.list_calls("bob")) == 2 and len(store.list_usage("bob")) == 1
    assert store.erase_user("alice") == {k: 0 for k in counts}  # nothing left


def test_erase_session_removes_it_and_what_derives_from_it(store: Store) -> None:
    mine = _everything_of(store, "alice", "Alice's own prompt")
    _everything_of(store, "bob", "Bob's own prompt")
    counts = store.erase_session("alice", mine["session"], ["h-alice"])
    assert (counts["sessions"], counts["messages"], counts["memories"], counts["facts"]) \
        == (1, 1, 1, 1)
    assert (counts["jobs"], counts["calls"], counts["usage_log"]) == (1, 1, 1)
    assert counts["system_prompts"] == 1 and counts["embedding_cache"] == 1
    assert counts["paragraphs_seen"] == 1  # the one first seen in the erased session
    assert counts["response_sessions"] == 1
    assert store.response_session("alice", "resp-alice") is None
    assert store.response_session("alice", "resp2-alice") == mine["kept_session"]
    assert counts["context_objects"] == counts["fidelity_transitions"] == 1
    assert store.context_objects("alice", mine["session"]) == []
    assert store.fidelity_transitions("alice", mine["session"]) == []
    assert len(store.context_objects("alice", mine["kept_session"])) == 1
    assert store.see_paragraphs("alice", "s3", "m3", ["p2"], 9.0)[0].sessions == 2
    assert "users" not in counts and store.get_user("alice") is not None
    assert store.get_session("alice", mine["session"]) is None
    assert [s.id for s in store.list_sessions("alice")] == [mine["kept_session"]]
    assert [m.id for m in store.iter_memories("alice")] == [mine["kept"]]
    assert [f.value for f in store.get_facts("alice")] == ["tea"]
    assert [c["id"] for c in store.list_calls("alice")] == ["call2-alice"]
    assert store.list_jobs("dead", "alice") == []
    assert len(store.list_jobs("pending", "alice")) == 1
    assert [m.content for m, _ in store.keyword_messages("alice", "said kept", 5)] \
        == ["alice kept this"]
    assert store.nearest_messages("alice", vec(2), 5) == []
    assert store.forgotten("alice", ["d1"]) == {"d1"}  # tombstones are the user's, kept
    assert len(list(store.iter_memories("bob"))) == 2 and len(store.list_sessions("bob")) == 2


def test_deep_scrub_reports_its_steps_and_keeps_every_row(store: Store) -> None:
    s = store.create_session(session("alice"))
    gone, kept = store.append_messages("alice", s.id, [NewMessage("user", "say Quokkalith"),
                                                       NewMessage("user", "and tea")],
                                       [1, 1], [None, None], 1.0)
    store.erase_message("alice", s.id, gone.id)
    done = store.deep_scrub()
    assert done and all(isinstance(line, str) and line for line in done)
    assert not any(line.startswith("NOT") for line in done)  # a test server keeps no WAL
    assert [m.id for m in store.get_messages("alice", s.id)] == [kept.id]
    assert store.keyword_messages("alice", "tea", 5)[0][0].id == kept.id


def test_erase_message_removes_it_and_what_derives_from_it(store: Store) -> None:
    _everything_of(store, "alice", "Alice's own prompt")
    s = store.create_session(session("alice"))
    first, second = store.append_messages(
        "alice", s.id, [NewMessage("user", "alice moved to Porto"),
                        NewMessage("user", "alice keeps bees")], [3, 3], [None, None], 4.0)
    store.set_message_embeddings("alice", [(first.id, vec(3)), (second.id, vec(4))])
    made = store.insert_memory(memory("alice lives in Porto", user="alice", session_id=s.id,
                                      provenance_message_id=first.id), vec(5))
    store.insert_fact(fact("Porto", user_id="alice", key="city", source_message_id=first.id))
    store.enqueue_job("llm_extract", {"message_id": first.id}, "alice", 4.0)
    store.see_paragraphs("alice", s.id, first.id, ["p-first"], 4.0)
    # a tool result's context objects go with its message, by the tool call id
    tool, = store.append_messages("alice", s.id, [NewMessage(
        "tool", "file text", tool_call_id="tc-o1")], [3], [None], 4.0)
    store.add_context_objects([_context_object("o1", "alice", s.id),
                               _context_object("o2", "alice", s.id)])
    store.apply_transitions("alice", s.id, [
        FidelityTransition("o1", 0, 3, "pressure", "warning", 10),
        FidelityTransition("o2", 0, 3, "pressure", "warning", 10)], {}, 4.0)
    assert store.erase_message("alice", s.id, tool.id)["context_objects"] == 1
    assert [o.object_id for o in store.context_objects("alice", s.id)] == ["o2"]
    assert [t.object_id for t in store.fidelity_transitions("alice", s.id)] == ["o2"]
    summary = store.insert_memory(memory("alice moved", user="alice", session_id=s.id), vec(6))
    store.mark_compressed("alice", s.id, [first.id], summary.id)
    store.update_session("alice", s.id, summary_text="alice moved", summary_token_count=2)
    version = store.get_session("alice", s.id).history_version  # type: ignore[union-attr]
    counts = store.erase_message("alice", s.id, first.id, ["h-alice"])
    assert (counts["messages"], counts["memories"], counts["facts"], counts["jobs"]) \
        == (1, 2, 1, 1)  # the memory made from it and the summary it was compacted into
    assert counts["embedding_cache"] == 1 and "sessions" not in counts
    assert counts["paragraphs_seen"] == 1
    kept = store.get_session("alice", s.id)
    assert kept is not None and kept.history_version == version + 1
    assert kept.summary_text is None and kept.summary_token_count == 0
    assert [m.id for m in store.get_messages("alice", s.id)] == [second.id]
    assert not {made.id, summary.id} & {m.id for m in store.iter_memories("alice")}
    assert "Porto" not in [f.value for f in store.get_facts("alice", active_only=False)]
    assert store.keyword_messages("alice", "Porto", 5) == []
    assert [m.id for m, _ in store.nearest_messages("alice", vec(4), 5)][:1] == [second.id]
    assert first.id not in {m.id for m, _ in store.nearest_messages("alice", vec(3), 5)}
    assert len(store.list_sessions("alice")) == 3
    assert store.erase_message("alice", s.id, first.id)["messages"] == 0


def test_a_call_report_is_deleted_by_its_owner_only(store: Store) -> None:
    record_calls(store)
    assert not store.delete_call("bob", "c1")
    assert store.delete_call("alice", "c1")
    assert not store.delete_call("alice", "c1")
    assert "c1" not in call_ids(store.list_calls("alice"))
    assert call_ids(store.list_calls("bob")) == ["b1"]


def test_forgetting_a_memory_drops_its_cached_embedding(store: Store) -> None:
    """The cache is keyed by the hash of the exact text the embedder saw, capitals and
    all (memd.models.embedder.text_hash)."""
    from memd.models.embedder import text_hash

    text = "Deploys go to Frankfurt on Mondays"
    mem = store.insert_memory(memory(text), vec(0))
    store.put_cached_embeddings("m", [(text_hash(text), b"\x01")])
    assert store.delete_memory("alice", mem.id)
    assert store.get_cached_embeddings("m", [text_hash(text)]) == {}


# -- the suite's own coverage (keep last) -------------------------------------------------
def test_sessions_list_by_page_workspace_and_client(store: Store) -> None:
    made = [store.create_session(replace(
        session("alice", f"s{i}", metadata={"identity": {"client": f"c{i % 2}"}}),
        created_at=float(i % 2), workspace="proj" if i < 2 else None)) for i in range(4)]
    store.create_session(session("bob", "sb"))
    order = [x.id for x in store.list_sessions("alice")]
    assert order == ["s1", "s3", "s0", "s2"]  # newest first, then by id
    pages, after = [], None
    while page := store.list_sessions("alice", 1, after=after):
        pages.append(page[0].id)
        after = (page[0].created_at, page[0].id)
    assert pages == order
    assert [x.id for x in store.list_sessions("alice", workspace="proj")] == ["s1", "s0"]
    assert [x.id for x in store.list_sessions("alice", workspace="")] == ["s3", "s2"]
    assert [x.id for x in store.list_sessions("alice", client="c0")] == ["s0", "s2"]
    assert store.list_sessions("alice", client="nobody") == []
    assert len(made) == 4


def test_usage_totals_group_by_day_model_workspace_and_client(store: Store) -> None:
    def use(uid: str, at: float, model: str, ws: str | None, client: str | None) -> None:
        store.record_usage(Usage(id=f"{uid}{at}", user_id=uid, created_at=at, workspace=ws,
                                 model=model, prompt_tokens=10, completion_tokens=2,
                                 cost_microcents=5, metadata={"client": client}))
    use("alice", 86400.0 * 3 + 1, "gpt", "proj", "opencode")
    use("alice", 86400.0 * 3 + 2, "llama", None, None)
    use("alice", 86400.0 * 4, "gpt", "proj", "opencode")
    use("bob", 86400.0 * 4, "gpt", None, None)
    days = store.usage_totals("alice", "day")
    assert [(t.key, t.calls, t.prompt_tokens, t.completion_tokens, t.cost_microcents)
            for t in days] == [(3, 2, 20, 4, 10), (4, 1, 10, 2, 5)]
    assert {t.key: t.calls for t in store.usage_totals("alice", "model")} == \
        {"gpt": 2, "llama": 1}
    assert {t.key: t.calls for t in store.usage_totals("alice", "workspace")} == \
        {"proj": 2, "": 1}
    assert {t.key: t.calls for t in store.usage_totals("alice", "client")} == \
        {"opencode": 2, None: 1}
    window = store.usage_totals("alice", "model", since=86400.0 * 3 + 2, until=86400.0 * 4)
    assert [(t.key, t.calls) for t in window] == [("llama", 1)]
    with pytest.raises(ValueError):
        store.usage_totals("alice", "hour")


def test_pauses_are_set_and_cleared_per_user_and_workspace(store: Store) -> None:
    assert store.pauses("alice") == {}
    assert store.set_paused("alice", "", True, 5.0)
    assert not store.set_paused("alice", "", True, 6.0)  # already paused: kept as it was
    assert store.set_paused("alice", "proj", True, 7.0)
    assert store.pauses("alice") == {"": 5.0, "proj": 7.0} and store.pauses("bob") == {}
    assert store.set_paused("alice", "", False, 8.0)
    assert not store.set_paused("alice", "", False, 9.0)
    assert store.pauses("alice") == {"proj": 7.0}


@pytest.mark.parametrize("name", BACKENDS)
def test_every_protocol_method_is_exercised(name: str) -> None:
    """Every public method of the Store protocol was called on this backend by the
    contract tests above, all of which must have run before this one (in this run)."""
    assert {"close", "transaction", "memory_candidates", "create_user",
            "put_cached_embeddings"} <= set(PROTOCOL_METHODS)  # the enumeration works
    module = sys.modules[__name__]
    contract = {n for n, f in vars(module).items() if n.startswith("test_")
                and inspect.isfunction(f) and "store" in inspect.signature(f).parameters}
    not_run = sorted(contract - RAN[name])
    assert not not_run, (f"the coverage check needs every contract test to run on {name} "
                         f"before it; not run: {not_run}")
    uncovered = sorted(set(PROTOCOL_METHODS) - CALLED[name])
    assert not uncovered, f"Store methods no contract test calls on {name}: {uncovered}"
