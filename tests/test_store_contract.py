"""The Store protocol's contract, run against every backend on a real database.

A new backend joins by adding its name to ``BACKENDS`` and a branch in ``make_store``;
every test here then runs against it too.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pg
import pytest

from memd.auth import acting_as
from memd.backends.base import Store
from memd.errors import Conflict, InvalidInput, MigrationError, NotFound, StorageError
from memd.types import (
    Fact,
    Found,
    Memory,
    MemoryFilter,
    NewMessage,
    Provenance,
    Scope,
    Session,
    Tier,
    Usage,
)

DIM = 8
BACKENDS = ["sqlite", "postgres"]
PG_PARTITIONS = (4, 4, 4)


def make_store(kind: str, tmp_path: Path) -> Store:
    if kind == "sqlite":
        from memd.backends.sqlite import SQLiteStore

        return SQLiteStore(tmp_path / "contract.db", dim=DIM)
    if kind == "postgres":
        from memd.backends.postgres import PostgresStore

        def migrate(dsn: str) -> None:
            PostgresStore(dsn, dim=DIM, partitions=PG_PARTITIONS).close()

        # A fresh database per test, cloned from one migrated once for the session.
        dsn = pg.database(("contract", DIM, PG_PARTITIONS), migrate)
        return PostgresStore(dsn, dim=DIM, partitions=PG_PARTITIONS)
    raise AssertionError(kind)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = make_store(request.param, tmp_path)
    yield s
    s.close()


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


def test_is_a_store(store: Store) -> None:
    assert isinstance(store, Store)
    assert store.schema_version() >= 2


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    s.insert_memory(memory("kept across reopen"), vec(0))
    s.close()
    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    assert s.get_memory("alice", s.list_memories("alice", MemoryFilter())[0].id) is not None
    files = list((Path(__file__).parent.parent / "memd" / "sql" / "sqlite").glob("[0-9]*.sql"))
    assert s.schema_version() == len(files) == 6
    s.close()
    with pytest.raises(MigrationError, match="8-dim"):
        SQLiteStore(tmp_path / "m.db", dim=16)


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


def test_sqlite_message_knn_from_memory_equals_vec0(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Small histories answer the message vector channel from memory; it must give what
    vec0 gives (same ids, order and cosine, per session too), stay in step with new
    embeddings, and hand a history grown past the bound back to vec0."""
    import memd.backends.sqlite.vectors as sq
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    rng = np.random.default_rng(5)
    sessions = [s.create_session(session()) for _ in range(3)]
    ids: list[str] = []
    for i in range(30):
        msgs = s.append_messages("alice", sessions[i % 3].id, [NewMessage("user", f"m{i}")],
                                 [1], [None], 1.0)
        ids.append(msgs[0].id)
    vecs = rng.normal(size=(30, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    s.set_message_embeddings("alice", list(zip(ids[:20], vecs[:20], strict=True)))
    query = vecs[3] + 0.5 * vecs[7]
    query /= np.linalg.norm(query)

    def both(session_id: str | None = None) -> tuple[list[Any], list[Any]]:
        monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 4096)
        s._drop_caches()
        assert s._cached_message_vectors("alice") is not None  # loaded: from memory
        fast = [(m.id, round(x, 5)) for m, x in s.nearest_messages("alice", query, 8, session_id)]
        monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 1)
        s._drop_caches()
        assert s._cached_message_vectors("alice") is None  # over the bound: vec0
        slow = [(m.id, round(x, 5)) for m, x in s.nearest_messages("alice", query, 8, session_id)]
        return fast, slow

    for sid in (None, sessions[1].id):
        fast, slow = both(sid)
        assert fast == slow and len(fast) == (8 if sid is None else 7)
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 25)
    s._drop_caches()
    # early searches answer from vec0; the second starts loading the vectors in a thread
    first = s.nearest_messages("alice", query, 8)
    assert not s._message_loads
    again = s.nearest_messages("alice", query, 8)
    assert [m.id for m, _ in first] == [m.id for m, _ in again]
    assert [x for _, x in first] == pytest.approx([x for _, x in again], abs=1e-5)
    deadline = time.monotonic() + 10
    while s._message_vectors.get("alice") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(s._message_vectors["alice"].ids) == 20  # type: ignore[union-attr]
    s.set_message_embeddings("alice", list(zip(ids[20:], vecs[20:], strict=True)))
    assert s._message_vectors["alice"] is None  # 30 > 25: vec0 again
    near = s.nearest_messages("alice", vecs[25], 1)
    assert near[0][0].id == ids[25] and near[0][1] == pytest.approx(1.0, abs=1e-5)
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 4096)
    s._drop_caches()
    s._cached_message_vectors("alice")
    s.set_message_embeddings("alice", [(ids[0], vecs[29])])  # re-embedded: cache follows
    top2 = s.nearest_messages("alice", vecs[29], 2)  # ids[29] has the same vector
    assert {m.id for m, _ in top2} == {ids[0], ids[29]}
    s.close()


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


def test_sqlite_keyword_ranking_beside_the_vector_channel(tmp_path: Path) -> None:
    """On a file store the memory candidates' FTS5 ranking runs on the store's read-only
    side connection, in its own thread, while the caller runs the vector channel; the
    candidates are those of the keyword channel run in line. Where the side connection
    could not see the caller's view (a transaction's own writes) or is busy, it runs in
    line. Closing the store stops the side thread."""
    import threading

    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "side.db", dim=DIM)
    threads: list[str] = []
    workers: set[threading.Thread] = set()
    rank = s._side.rank

    def spy(match: str, limit: int) -> list[tuple[str, float]]:
        threads.append(threading.current_thread().name)
        workers.add(threading.current_thread())
        return rank(match, limit)

    s._side.rank = spy  # type: ignore[method-assign]
    for i, text in enumerate(["rust compiler errors", "python rust bindings", "tea",
                              "rust borrow checker", "coffee"]):
        s.insert_memory(memory(text, importance=0.1 * i), vec(i % DIM))
    flt = MemoryFilter(now=20.0)
    kw: dict[str, Any] = dict(knn_k=1, keyword_k=3, frequent_k=0)

    def in_line() -> dict[str, Found]:
        s._start_side_ranking = lambda *_: None  # type: ignore[method-assign]
        try:
            return s.memory_candidates("alice", "rust", vec(2), flt, **kw)
        finally:
            del s._start_side_ranking

    got = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert threads == ["memd-sqlite-side_0"]
    assert got == in_line() and sum(f.keyword > 0 for f in got.values()) == 3
    with s.transaction():  # uncommitted: only the store's own connection sees it
        fresh = s.insert_memory(memory("zanzibar, in a transaction"), vec(7))
        assert s.memory_candidates("alice", "zanzibar", vec(2), flt, **kw)[fresh.id].keyword == 1
    assert len(threads) == 1
    with s._side.lock:  # busy with another caller's ranking
        assert s.memory_candidates("alice", "rust", vec(2), flt, **kw) == in_line()
    assert len(threads) == 1
    assert s.memory_candidates("alice", "zanzibar", vec(2), flt, **kw)[fresh.id].keyword == 1
    assert len(threads) == 2
    s.close()
    assert workers and not any(t.is_alive() for t in workers)


def test_sqlite_full_text_of_an_older_data_dir_is_reindexed(tmp_path: Path) -> None:
    """A data dir from before 005_fts_per_user.sql (shared terms plus an owner column)
    is reindexed when opened: its memories and messages are found by keyword after."""
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "old.db", dim=DIM)
    m = s.insert_memory(memory("deploys with docker"), vec(0))
    sess = s.create_session(session())
    s.append_messages("alice", sess.id, [NewMessage("user", "the cluster runs kubernetes")],
                      [1], [None], 1.0)
    s.insert_memory(memory("docker for bob", user="bob"), vec(0))
    with s.transaction():  # back to the schema-4 layout, holding the old index
        for table in ("memories_fts", "messages_fts"):
            s._write(f"DROP TABLE {table}")
            # SQLite 3.54 leaves a contentless_unindexed table's _content shadow behind
            s._write(f"DROP TABLE IF EXISTS {table}_content")
        s._write("CREATE VIRTUAL TABLE memories_fts USING fts5(content_text, owner, "
             "memory_id UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2')")
        s._write("CREATE VIRTUAL TABLE messages_fts USING fts5(content, owner, session_id "
             "UNINDEXED, message_id UNINDEXED, tokenize = 'porter unicode61 "
             "remove_diacritics 2')")
        s._write("DELETE FROM schema_migrations WHERE version = 5")
    s.close()
    s = SQLiteStore(tmp_path / "old.db", dim=DIM)
    assert s._rows("SELECT count(*) FROM schema_migrations WHERE version = 5")[0][0] == 1
    assert [x.id for x, _ in s.keyword_memories("alice", "docker", 5, MemoryFilter())] == [m.id]
    assert [x.content for x, _ in s.keyword_messages("alice", "kubernetes", 5)] \
        == ["the cluster runs kubernetes"]
    # contentless: the index keeps no copy of the text
    assert s._rows("SELECT content_text FROM memories_fts") == [(None,), (None,)]
    s.close()


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
    m = store.insert_memory(memory("secret plan zebra", entities=("zebra",)), vec(0))
    store.put_cached_embeddings("model", [(m.content_hash, vec(0).tobytes())])
    assert store.delete_memory("alice", m.id)
    assert store.get_memory("alice", m.id) is None
    assert store.nearest_memories("alice", vec(0), 5, MemoryFilter()) == []
    assert store.keyword_memories("alice", "zebra", 5, MemoryFilter()) == []
    assert store.memories_by_entities("alice", ["zebra"], 5, MemoryFilter()) == []
    assert store.get_cached_embeddings("model", [m.content_hash]) == {}
    assert not store.delete_memory("alice", m.id)


def test_sqlite_forget_leaves_no_readable_bytes(tmp_path: Path) -> None:
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "f.db", dim=DIM)
    m = s.insert_memory(memory("xylophone-secret-4242"), vec(0))
    s.delete_memory("alice", m.id)
    s._rows("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"xylophone-secret-4242" not in blob


# -- facts, usage, jobs, cache --------------------------------------------------------
def fact(value: str, **kw: object) -> Fact:
    fields: dict[str, object] = dict(
        id=uuid.uuid4().hex, user_id="alice", category="identity", key="name", value=value,
        confidence=1.0, importance=0.8, created_at=1.0, updated_at=1.0,
    )
    fields.update(kw)
    return Fact(**fields)  # type: ignore[arg-type]


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


def test_sqlite_checkpoint_moves_the_wal_into_the_database(tmp_path: Path) -> None:
    import apsw

    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "c.db", dim=DIM)
    for i in range(50):
        s.insert_memory(memory(f"note {i}"), vec(i % DIM))
    probe = apsw.Connection(str(tmp_path / "c.db"))
    busy, frames, done = probe.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()
    assert frames > 0 and done < frames  # the writes sit in the WAL
    s.checkpoint()
    busy, frames, done = probe.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()
    assert done == frames
    probe.close()
    s.close()


def test_sqlite_checkpoints_run_on_the_stores_thread_not_in_a_write(
    tmp_path: Path,
) -> None:
    """SQLite's automatic checkpoint would run in the commit that takes the WAL past its
    limit; the store's WAL hook replaces it and wakes a thread of its own once the WAL
    holds checkpoint_pages. Under writes back to back the thread may fall behind: a write
    then checkpoints in line at 10x, so the WAL stays short either way."""
    import apsw

    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "c.db", dim=DIM)
    s.checkpoint_pages = 40
    ran_on: list[str] = []
    checkpoint = s.checkpoint

    def recorded() -> None:
        ran_on.append(threading.current_thread().name)
        checkpoint()

    s.checkpoint = recorded  # type: ignore[method-assign]
    probe = apsw.Connection(str(tmp_path / "c.db"))
    try:
        for i in range(300):
            s.insert_memory(memory(f"note {i} " + "words " * 50), vec(i % DIM))
        # Once the writes stop, the frames not yet copied are fewer than checkpoint_pages
        # (the last writes restarted the WAL and stayed below the limit: nothing is due),
        # or the thread copies them all.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            busy, frames, done = probe.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()
            if done == frames or frames < s.checkpoint_pages:
                break
            time.sleep(0.01)
        assert len(ran_on) >= 3 and set(ran_on) == {"memd-sqlite-checkpoint"}, ran_on
        assert done == frames or frames < s.checkpoint_pages, (done, frames)
        wal = (tmp_path / "c.db-wal").stat().st_size // 4096
        assert wal < 10 * 40 + 100, wal  # restarted, not 300 writes long (~6,600 pages)
    finally:
        probe.close()
        s.close()
    assert not s._checkpoint_thread.is_alive()  # type: ignore[union-attr]


# -- transactions (both backends) ------------------------------------------------------
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


# -- PostgreSQL only: partitions, plans, migrations, concurrency ------------------------
@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[Any]:
    s = make_store("postgres", tmp_path)
    yield s
    s.close()


def test_pg_keyword_channel_runs_beside_the_other_channels(pg_store: Any) -> None:
    """Outside row-level security and transactions, the memory candidates' keyword
    channel is a statement of its own on a worker thread (and its own connection), run
    while the caller runs the other channels; inside a transaction it is a branch of the
    caller's one statement. Both give the same candidates."""
    import threading

    s = pg_store
    for i, text in enumerate(("rust notes", "rust compiler", "tea", "coffee")):
        s.insert_memory(memory(text, entities=("rust",) if "rust" in text else ()),
                        vec(i))
    calls: list[tuple[str, bool, bool]] = []  # thread, has the keyword, the KNN channel
    real = s._rows_in

    def spy(tables: Any, query: str, params: Any, generic: bool = True) -> Any:
        calls.append((threading.current_thread().name, "'k' AS via" in query,
                      "'v' AS via" in query))
        return real(tables, query, params, generic)

    s._rows_in = spy
    kw: dict[str, Any] = dict(knn_k=2, keyword_k=2, entities=["rust"], entity_k=2,
                              frequent_k=2)
    flt = MemoryFilter(now=time.time())
    here = threading.current_thread().name
    beside = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert len(calls) == 2 and (here, False, True) in calls
    worker = next(call for call in calls if call[0] != here)
    assert worker[0].startswith("memd-keyword") and worker[1:] == (True, False)
    assert any(f.keyword > 0 for f in beside.values())
    calls.clear()
    with s.transaction():
        inline = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert calls == [(here, True, True)]
    assert {k: (f.memory.id, round(f.similarity, 6), round(f.keyword, 6), f.entity)
            for k, f in beside.items()} == {
        k: (f.memory.id, round(f.similarity, 6), round(f.keyword, 6), f.entity)
        for k, f in inline.items()}
    # A user who shares their partitions gets custom plans: the worker's statement then
    # goes through _q, on the side pool, never on the main pool, which the caller may
    # hold (a read batch) while it waits.
    other = next(u for u in (f"other{i}" for i in range(2000))
                 if s._tables(u).memory_leaves == s._tables("alice").memory_leaves)
    s.insert_memory(memory("other's rust", user=other), vec(0))
    s._sole_owners.clear()
    assert not s._sole_owner("alice", s._tables("alice"))
    main_pool = s._pool.connection

    def main_pool_but_not_for_workers(*args: Any, **kwargs: Any) -> Any:
        assert not threading.current_thread().name.startswith("memd-keyword")
        return main_pool(*args, **kwargs)

    s._pool.connection = main_pool_but_not_for_workers
    calls.clear()
    with s.read_batch():
        shared = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert len(calls) == 2 and shared.keys() == beside.keys()


def _hash_partition(relname: str) -> str:
    """'messages_p002_202611' -> 'p002': which hash partition a leaf belongs to."""
    return next(part for part in relname.split("_") if re.fullmatch(r"p\d{3}", part))


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a JSON plan that reads a relation or an index."""
    out = [plan] if "Relation Name" in plan or "Index Name" in plan else []
    for child in plan.get("Plans", []):
        out += _scans(child)
    return out


@contextmanager
def _executed_plans(store: Any, *settings: str) -> Iterator[list[dict[str, Any]]]:
    """The plans of the statements the store runs inside the block, as PostgreSQL ran
    them: auto_explain sends each plan to the client as a NOTICE (JSON format) when the
    statement's portal is dropped, i.e. on the next statement: the closing SET (a utility
    statement, not planned itself) delivers the last one."""
    plans: list[dict[str, Any]] = []

    def on_notice(diag: Any) -> None:
        text = diag.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1])["Plan"])

    with store.transaction():
        conn = store._current()
        role = conn.execute("SELECT current_user").fetchone()[0]
        conn.execute("SET LOCAL ROLE NONE")  # auto_explain's settings are superuser's
        conn.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_format = json",
                        "auto_explain.log_level = notice",
                        "auto_explain.log_nested_statements = on", *settings):
            conn.execute(f"SET LOCAL {setting}")
        conn.execute(f"SET LOCAL ROLE {role}")  # memd_app when acting as a user (RLS)
        conn.add_notice_handler(on_notice)
        try:
            yield plans
            conn.execute("SET LOCAL ROLE NONE")
            conn.execute("SET LOCAL auto_explain.log_min_duration = -1")
        finally:
            conn.remove_notice_handler(on_notice)


def _load(store: Any, user: str, memories: int, now: float) -> None:
    """``memories`` memories for ``user`` (every 10th in working memory), in one statement;
    the word ``rare<user>`` appears in two of them."""
    with store.transaction():
        store._current().execute(
            "INSERT INTO memories (memory_id, user_id, memory_tier, memory_scope, content_text, "
            "content_hash, provenance_type, created_at, updated_at, token_count, embedding) "
            "SELECT md5(%(u)s || i), %(u)s, CASE WHEN i %% 10 = 0 THEN 0 ELSE 3 END, 1, "
            "'note ' || i || ' about topic' || (i %% 13) || "
            "CASE WHEN i %% 200 = 7 THEN ' rare' || %(u)s ELSE '' END, md5(%(u)s || i || 'h'), "
            "0, %(now)s, %(now)s, 5, "
            "(SELECT array_agg(random()::real) FROM generate_series(1, %(dim)s) WHERE i > 0)"
            "::vector FROM generate_series(1, %(n)s) i",
            {"u": user, "now": now, "dim": DIM, "n": memories},
        )


def test_pg_each_user_lands_in_one_partition_of_each_table(pg_store: Any) -> None:
    s, now = pg_store, time.time()
    for user in ("alice", "bob", "carol", "dave", "erin"):
        sess = s.create_session(session(user))
        s.append_messages(user, sess.id, [NewMessage("user", "hi"), NewMessage("user", "ho")],
                          [1, 1], [None, None], now)
        s.insert_memory(memory("durable", user=user), vec(0))
        s.insert_memory(memory("scratch", user=user, tier=Tier.WORKING, session_id=sess.id,
                               scope=Scope.LOCAL), vec(1))
        s.insert_fact(fact("Alex", user_id=user))
        s.link_entities(user, "m1", ["python"])
        s.record_usage(Usage(id=f"u-{user}", user_id=user, created_at=now))
    tables = ("sessions", "messages", "memories_durable", "memories_working", "facts",
              "memory_entities", "usage_log")
    with s.transaction():
        conn = s._current()
        for user in ("alice", "bob", "carol", "dave", "erin"):
            leaves: dict[str, set[str]] = {}
            for table in tables:
                rows = conn.execute(
                    f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE user_id = %s",
                    (user,),
                ).fetchall()
                leaves[table] = {r[0] for r in rows}
                assert len(leaves[table]) == 1, (user, table, leaves[table])
            # Equal partition counts (4, 4, 4): the same hash partition in every table.
            assert len({_hash_partition(next(iter(v))) for v in leaves.values()}) == 1
            (history_leaf,) = leaves["messages"]
            assert history_leaf.endswith(time.strftime("_%Y%m", time.gmtime(now)))
        (working_leaf,) = conn.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM memories WHERE memory_tier = 0 "
            "AND user_id = 'alice'"
        ).fetchone()
        persistence = conn.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = %s::regclass", (working_leaf,)
        ).fetchone()
        assert working_leaf.startswith("memories_working_") and persistence == ("u",)


def test_pg_hot_queries_touch_one_partition_through_indexes(pg_store: Any) -> None:
    s, now = pg_store, time.time()
    for user in ("alice", "bob", "carol", "dave", "erin", "frank"):
        _load(s, user, 1000, now)  # enough that the GIN probe beats reading the user's rows
        sess = s.create_session(session(user))
        s.append_messages(user, sess.id, [NewMessage("user", f"turn {i}") for i in range(200)],
                          [1] * 200, [None] * 200, now)
    with s.transaction():
        s._current().execute("ANALYZE")
    alice_session = s.list_sessions("alice")[0].id
    (part,) = {_hash_partition(r[0]) for r in s._rows(
        "SELECT DISTINCT tableoid::regclass::text FROM memories WHERE user_id = 'alice'")}

    def check(plan: dict[str, Any], index_part: str) -> None:
        scans = _scans(plan)
        assert scans, plan
        assert all(n["Node Type"] != "Seq Scan" for n in scans), plan
        assert {_hash_partition(n["Relation Name"]) for n in scans if "Relation Name" in n} \
            == {part}
        assert any(index_part in n.get("Index Name", "") for n in scans), (
            index_part, [(n["Node Type"], n.get("Index Name")) for n in scans])

    # A test partition holds a few hundred rows per user, where reading them all (a
    # sequential scan, or a user_id index scan plus a sort for KNN) is genuinely cheaper
    # than any index made for millions of rows, and the planner rightly picks that. With
    # those paths disabled it may only choose an index that can answer the query, so the
    # plan shows (1) pruning to the user's one hash partition and (2) that the intended
    # index is usable by the store's exact SQL (e.g. the partial HNSW index's WHERE
    # is_active is implied by the memory filter). enable_* only penalizes, never forbids.
    with _executed_plans(s, "enable_seqscan = off") as plans:
        history = s.get_messages("alice", alice_session, active_only=True, newest_first=True,
                                 limit=20)
    assert [m.turn_index for m in history] == list(range(200, 180, -1))
    (plan,) = plans
    check(plan, "turn_index")  # idx_messages_session_active, on every monthly leaf

    with _executed_plans(s, "enable_seqscan = off", "enable_sort = off") as plans:
        near = s.nearest_memories("alice", vec(0), 10, MemoryFilter(now=now))
    assert len(near) == 10
    (plan,) = plans
    check(plan, "embedding")  # HNSW on memories_durable_pNNN and memories_working_pNNN

    with _executed_plans(s, "enable_seqscan = off") as plans:
        hits = s.keyword_memories("alice", "rarealice", 10, MemoryFilter(now=now))
    assert len(hits) == 5 and hits[0][1] == 1.0
    (plan,) = plans
    check(plan, "content_tsv")  # GIN over the generated tsvector

    # The same under Row-Level Security (an authenticated request acting as alice, as the
    # role memd_app): still one partition, through the same indexes. Keyword search
    # probes the GIN index inside memd_keyword_memory_ids (the @@ match is not LEAKPROOF,
    # so PostgreSQL would not use the index below a policy), then reads rows by key.
    with acting_as("alice"):
        with _executed_plans(s, "enable_seqscan = off") as plans:
            assert s.get_messages("alice", alice_session, active_only=True,
                                  newest_first=True, limit=20) == history
        (plan,) = plans
        check(plan, "turn_index")
        with _executed_plans(s, "enable_seqscan = off", "enable_sort = off") as plans:
            assert [m.id for m, _ in s.nearest_memories("alice", vec(0), 10,
                                                        MemoryFilter(now=now))] \
                == [m.id for m, _ in near]
        (plan,) = plans
        check(plan, "embedding")
        with _executed_plans(s, "enable_seqscan = off") as plans:
            assert s.keyword_memories("alice", "rarealice", 10, MemoryFilter(now=now)) == hits
        inner = [p for p in plans if any("content_tsv" in n.get("Index Name", "")
                                         for n in _scans(p))]
        assert len(inner) == 1 and len(plans) == 2, plans
        for plan in plans:  # the GIN probe, and the rows read back by an index
            check(plan, "content_tsv" if plan is inner[0] else "memories_")


def test_pg_hnsw_candidate_list_covers_the_candidates_knn(pg_store: Any) -> None:
    """Every pooled connection searches HNSW with a candidate list (hnsw.ef_search) at
    least as long as the memory candidates' KNN limit: a shorter one makes each such
    KNN go on iteratively past its first pass."""
    from memd.engine.retrieve import Channels

    s = pg_store
    for pool in (s._pool, s._side_pool, s._own_pool):
        with pool.connection() as conn:
            (ef,), = conn.execute("SHOW hnsw.ef_search").fetchall()
            assert int(ef) >= Channels().knn_k, (pool.name, ef)


def test_pg_keyword_relevance_is_ts_rank_alike_with_and_without_rls(pg_store: Any) -> None:
    """Keyword relevance on PostgreSQL is ts_rank (term frequency) of the OR of the query's
    words, relative to the best hit; the row-level-security path's function (migration
    005) ranks exactly as the owner's query does."""
    s = pg_store
    texts = ["docker", "docker compose and docker swarm", "docker docker docker, only docker",
             "nothing relevant"]
    made = [s.insert_memory(memory(t), vec(i)) for i, t in enumerate(texts)]
    expected = [float(r) for (r,) in s._rows(
        "SELECT ts_rank(to_tsvector('english', t), websearch_to_tsquery('english', 'docker'))"
        "::float8 FROM unnest(%s::text[]) WITH ORDINALITY AS x (t, n) ORDER BY n",
        (texts[:3],))]
    top = max(expected)
    hits = s.keyword_memories("alice", "docker", 10, MemoryFilter())
    assert {m.id: round(rel, 6) for m, rel in hits} \
        == {made[i].id: round(expected[i] / top, 6) for i in range(3)}
    assert [m.id for m, _ in hits][0] == made[2].id and len(set(expected)) == 3
    with acting_as("alice"):
        assert s.keyword_memories("alice", "docker", 10, MemoryFilter()) == hits


def _filters(plan: dict[str, Any]) -> list[str]:
    """Every Filter of a JSON plan's nodes."""
    own = [plan[k] for k in ("Filter", "Join Filter") if k in plan]
    return own + [f for child in plan.get("Plans", []) for f in _filters(child)]


def test_pg_rls_tests_own_rows_before_the_sharing_functions(pg_store: Any) -> None:
    """Under row-level security, a user's reads of their own memories and stats test
    ``user_id = memd.user_id`` before calling memd_shared_memory or memd_shares_workspace
    (migration 006): PostgreSQL stops an OR at its first true arm, and the functions cost
    a lookup per row, on the ~100 stats rows a compile reads. Sharing still works: a
    fellow member's workspace memory is read through them."""
    s = pg_store
    s.check_row_security()
    for user in ("alice", "bob"):
        s.create_user(user, user, 1.0)
        s.add_workspace_member("team", user, 1.0)
    mine = [s.insert_memory(memory(f"deploy note {i}", workspace=ws), vec(i))
            for i, ws in enumerate(("team", "team", None))]
    theirs = s.insert_memory(memory("deploy note of bob", user="bob", workspace="team"), vec(3))
    s.record_access("alice", [(m.id, 1.0) for m in mine], now=2.0)
    s.record_access("bob", [(theirs.id, 1.0)], now=2.0)
    flt = MemoryFilter(workspaces=("team", ""))
    with acting_as("alice"), _executed_plans(s) as plans:
        found = s.memory_candidates("alice", "deploy note", vec(0), flt, knn_k=10,
                                    keyword_k=10, entities=("deploy",), entity_k=10,
                                    frequent_k=10)
        shared = s.memory_candidates("bob", "deploy note", vec(3),
                                     MemoryFilter(workspaces=("team",)), knn_k=10,
                                     keyword_k=10)
    assert set(found) == {m.id for m in mine} and set(shared) == {theirs.id}
    # The policies' filters (the functions' own statements, logged as nested ones, have
    # no test of memd.user_id around their calls).
    checked = [f for plan in plans for f in _filters(plan) if "memd.user_id" in f
               and ("memd_shared_memory" in f or "memd_shares_workspace" in f)]
    assert len(checked) >= 3
    for f in checked:
        first = min(i for i in (f.find("memd_shared_memory"), f.find("memd_shares_workspace"))
                    if i >= 0)
        assert -1 < f.find("current_setting('memd.user_id'") < first, f


def test_pg_entity_reads_under_rls_plan_only_the_users_partition(pg_store: Any) -> None:
    """memory_entities' workspace-read policy calls memd_shared_memory (migration 007):
    its EXISTS over memories could not be pruned, so every read of memory_entities under
    row-level security planned a subquery over every memories partition, which is slow
    at the production layout. A fellow member's
    workspace memory is still found by its entities, their private one is not."""
    s = pg_store
    s.check_row_security()
    for user in ("alice", "bob"):
        s.create_user(user, user, 1.0)
        s.add_workspace_member("team", user, 1.0)
    made = {}
    for key, user, ws in (("own", "alice", None), ("shared", "bob", "team"),
                          ("private", "bob", None), ("outsider", "carol", "team")):
        made[key] = s.insert_memory(memory(f"{key} rust notes", user=user, workspace=ws,
                                           entities=("rust",)), vec(len(made)))
        s.link_entities(user, made[key].id, ["rust"])
    (part,) = {_hash_partition(r[0]) for r in s._rows(
        "SELECT DISTINCT tableoid::regclass::text FROM memories WHERE user_id = 'alice'")}
    with acting_as("alice"):
        with _executed_plans(s) as plans:
            mine = s.memories_by_entities("alice", ["rust"], 10, MemoryFilter())
        assert [m.id for m in mine] == [made["own"].id]
        read = {_hash_partition(n["Relation Name"]) for plan in plans for n in _scans(plan)
                if "Relation Name" in n}
        assert read == {part}, read
        shared = s.memories_by_entities("bob", ["rust"], 10, MemoryFilter(workspaces=("team",)))
        assert [m.id for m in shared] == [made["shared"].id]
        assert s.memories_by_entities("bob", ["rust"], 10, MemoryFilter()) == shared
        # The links themselves: a fellow member's workspace memory's, not their private
        # one's, nor those of a "team" memory of carol, who is no member.
        links = {r[0] for r in s._rows("SELECT memory_id FROM memory_entities")}
        assert links == {made["own"].id, made["shared"].id}, links


def test_pg_access_bumps_leave_memory_rows_alone(pg_store: Any) -> None:
    """Access stats live in memory_stats: a bump writes no new version of the memory's
    row (which would go into its HNSW, GIN and b-tree indexes again)."""
    s = pg_store
    a = s.insert_memory(memory("often used"), vec(0))
    version = "SELECT xmin::text FROM memories WHERE user_id = 'alice' AND memory_id = %s"
    before = s._rows(version, (a.id,))
    s.record_access("alice", [(a.id, 0.5)], now=5.0)
    s.update_memory("alice", a.id, access_count=7)
    assert s._rows(version, (a.id,)) == before
    got = s.get_memory("alice", a.id)
    assert got is not None and got.access_count == 7 and got.last_accessed_at == 5.0
    assert s._rows("SELECT count(*) FROM memory_stats")[0][0] == 1
    assert s.delete_memory("alice", a.id)
    assert s._rows("SELECT count(*) FROM memory_stats")[0][0] == 0


def test_pg_schema_3_database_keeps_its_access_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database made by an older memd (schema 3: access stats in memories) is moved to
    memory_stats by migration 004 with every count intact."""
    import shutil
    from importlib import resources

    from memd.backends import postgres
    from memd.backends.common import migrations

    real = resources.files("memd.sql") / "postgres"
    old = tmp_path / "sql" / "postgres"
    old.mkdir(parents=True)
    for f in real.iterdir():
        if f.name.endswith(".sql") and int(f.name.split("_", 1)[0]) <= 3:
            shutil.copy(str(f), old / f.name)
    dsn = pg.database()
    with monkeypatch.context() as mp:
        mp.setattr(migrations.resources, "files", lambda _pkg: tmp_path / "sql")
        v3 = postgres.PostgresStore(dsn, dim=DIM, partitions=PG_PARTITIONS)
    assert v3.schema_version() == 3
    with v3.transaction():
        for i, user in enumerate(("alice", "bob")):
            v3._current().execute(
                "INSERT INTO memories (memory_id, user_id, memory_tier, memory_scope, "
                "content_text, content_hash, provenance_type, created_at, updated_at, "
                "token_count, access_count, last_accessed_at, relevance_accumulator) "
                "VALUES (%s, %s, 3, 1, 'x', 'h', 0, 1, 1, 1, %s, %s, %s)",
                (f"m{i}", user, 3 + i, 40.0 + i, 0.5 + i))
    v3.close()
    v4 = postgres.PostgresStore(dsn, dim=DIM, partitions=PG_PARTITIONS)
    try:
        assert v4.schema_version() == max(int(f.name.split("_", 1)[0]) for f in real.iterdir()
                                          if f.name.endswith(".sql"))
        for i, user in enumerate(("alice", "bob")):
            got = v4.get_memory(user, f"m{i}")
            assert got is not None
            assert (got.access_count, got.last_accessed_at, got.relevance_accumulator) \
                == (3 + i, 40.0 + i, 0.5 + i)
        v4.record_access("alice", [("m0", 1.0)], now=99.0)
        got = v4.get_memory("alice", "m0")
        assert got is not None and got.access_count == 4 and got.last_accessed_at == 99.0
    finally:
        v4.close()


def test_pg_migrations_are_recorded_once_and_keep_the_layout(pg_store: Any) -> None:
    from memd.backends.postgres import PostgresStore

    dsn = pg.cluster().dsn(pg_store.database)
    pg_store.insert_memory(memory("kept across reopen"), vec(0))
    again = PostgresStore(dsn, dim=DIM, partitions=(8, 8, 8))
    assert again.schema_version() == pg_store.schema_version() >= 5
    assert again.partitions == PG_PARTITIONS
    assert len(again.list_memories("alice", MemoryFilter())) == 1
    again.close()
    with pytest.raises(MigrationError, match="8-dim.*16-dim"):
        PostgresStore(dsn, dim=16)


def test_pg_concurrent_appends_keep_turns_unique(pg_store: Any) -> None:
    s = pg_store
    sess = s.create_session(session())

    def append(i: int) -> None:
        for j in range(10):
            s.append_messages("alice", sess.id, [NewMessage("user", f"{i}-{j}")], [1], [None],
                              float(j))

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turns = [m.turn_index for m in s.get_messages("alice", sess.id)]
    assert turns == list(range(1, 41))
    assert s.get_session("alice", sess.id).turn_count == 40


def test_pg_a_caught_failure_without_savepoint_rolls_the_transaction_back_loudly(
    pg_store: Any,
) -> None:
    """Jobs and appended messages join the caller's transaction without a savepoint (two
    round trips fewer each). If one fails and the caller catches the error inside the
    transaction, leaving the transaction raises: psycopg's COMMIT of an aborted
    transaction would otherwise be a silent ROLLBACK of everything in it."""
    s = pg_store
    sess = s.create_session(session())
    with pytest.raises(StorageError, match="rolled back"), s.transaction():
        s.record_usage(Usage(id="u1", user_id="alice", created_at=1.0))
        s.append_messages("alice", sess.id, [NewMessage("user", "kept?")], [1], [None], 1.0)
        with pytest.raises(InvalidInput):  # the server refuses \u0000 in jsonb
            s.enqueue_job("ingest", {"text": "a\x00b"}, "alice", 1.0)
    assert s.list_usage("alice") == []
    assert s.get_messages("alice", sess.id) == []
    assert s.claim_jobs(10.0, 10) == []
    assert s.get_session("alice", sess.id).turn_count == 0
    # Without a caught error the same writes commit, turn numbers and all.
    with s.transaction():
        s.append_messages("alice", sess.id, [NewMessage("user", "one"),
                                             NewMessage("assistant", "two")], [1, 1],
                          [None, None], 2.0)
        s.enqueue_job("embed_messages", {"ids": []}, "alice", 2.0)
    assert [m.turn_index for m in s.get_messages("alice", sess.id)] == [1, 2]
    assert s.get_session("alice", sess.id).turn_count == 2
    with pytest.raises(NotFound):
        s.append_messages("alice", "no-such-session", [NewMessage("user", "x")], [1], [None],
                          3.0)


def test_pg_reads_are_one_statement_each_and_a_batch_write_is_atomic(
    pg_store: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pooled connections are in autocommit: a read outside a transaction, alone or in a
    read batch (a compile's), is its statement alone, with no BEGIN and COMMIT round
    trips around it. A write in a read batch still runs in a transaction of its own, so
    one that fails halfway leaves nothing behind and the batch goes on."""
    from psycopg._connection_base import BaseConnection

    s = pg_store
    sess = s.create_session(session())
    commands: list[bytes] = []
    exec_command = BaseConnection._exec_command

    me = threading.current_thread()

    def spy(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is me:  # not the pool's threads making connections
            commands.append(command if isinstance(command, bytes) else str(command).encode())
        return exec_command(self, command, *args, **kwargs)

    monkeypatch.setattr(BaseConnection, "_exec_command", spy)
    assert s.get_session("alice", sess.id) is not None
    with s.read_batch():
        assert s.get_session("alice", sess.id) is not None
        assert s.get_messages("alice", sess.id) == []
    assert commands == []
    with s.read_batch():
        # The session's turn count is raised before the message insert fails (the
        # server refuses NUL in text): both are undone.
        with pytest.raises(InvalidInput):
            s.append_messages("alice", sess.id, [NewMessage("user", "a\x00b")], [1], [None],
                              1.0)
        assert s.get_session("alice", sess.id).turn_count == 0
        s.append_messages("alice", sess.id, [NewMessage("user", "kept")], [1], [None], 2.0)
    assert any(c.startswith(b"BEGIN") for c in commands)
    assert [m.content for m in s.get_messages("alice", sess.id)] == ["kept"]
    assert s.get_session("alice", sess.id).turn_count == 1


def test_pg_own_partition_statements_read_what_the_parents_would() -> None:
    """Outside row-level security and transactions, the memory candidates and the history
    are read from the user's own partitions (named from the server's hash function),
    prepared once per pooled connection and run with their generic plan; they return what
    the same reads through the partitioned parents return."""
    from memd.backends import postgres as pgb

    s = pgb.PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        now = time.time()
        users = [f"user-{i}" for i in range(40)] + ["ünïcode", "x" * 200]
        sessions = {}
        for i, user in enumerate(users):
            sess = sessions[user] = s.create_session(session(user))
            s.append_messages(user, sess.id, [NewMessage("user", f"turn {j} of {user}")
                                              for j in range(6)], [3] * 6, [None] * 6, now)
            kept = s.insert_memory(memory(f"rust notes {i}", user=user, entities=("rust",)),
                                   vec(i % DIM))
            s.insert_memory(memory(f"scratch rust {i}", user=user, tier=Tier.WORKING,
                                   session_id=sess.id, scope=Scope.LOCAL), vec((i + 1) % DIM))
            s.link_entities(user, kept.id, ["rust"])
            s.record_access(user, [(kept.id, 1.0)], now)
        with s.transaction():  # inside one: the parents, which see its writes
            assert not any(s._tables(user).own for user in users)
        flt = MemoryFilter(now=now)

        def reads(user: str) -> tuple[Any, ...]:
            return (
                s.memory_candidates(user, "rust notes", vec(0), flt, knn_k=5, keyword_k=5,
                                    entities=["rust"], entity_k=5, frequent_k=5),
                s.recent_messages(user, sessions[user].id, 10),
            )

        mine = {user: reads(user) for user in users}
        assert all(s._tables(user).own for user in users)
        for user in users:
            tables = s._tables(user)
            for table in ("memory_stats", "memory_entities", "messages"):
                (leaf,), = s._rows(f"SELECT DISTINCT tableoid::regclass::text FROM {table} "
                                "WHERE user_id = %s", (user,))
                assert leaf.startswith(getattr(tables, table)), (user, table, leaf)
            sharing = 0
            for table in ("memories_durable", "memories_working"):
                (leaf,), = s._rows(f"SELECT DISTINCT tableoid::regclass::text FROM {table} "
                                "WHERE user_id = %s", (user,))
                assert re.search(rf"FROM {leaf}\b", tables.memories), (user, leaf)
                sharing += s._rows(f"SELECT count(DISTINCT user_id) FROM {leaf} "
                                "WHERE user_id <> %s", (user,))[0][0]
            # A generic plan only for a user alone in their memory partitions.
            assert s._sole_owner(user, tables) == (sharing == 0), (user, sharing)
        alone = [user for user in users if s._sole_owner(user, s._tables(user))]
        assert 0 < len(alone) < len(users)  # 42 users in 32 partitions: both kinds
        pool = s._own_pool
        conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
        try:  # every connection of the pool: what it prepared, and how it planned it
            prepared = [row for conn in conns for row in conn.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")]
        finally:
            for conn in conns:
                pool.putconn(conn)
        # The candidates' statements (the KNN's), and their keyword channels' (beside).
        unions = [row for row in prepared if "'v' AS via" in row[0]]
        keyword = [row for row in prepared if "'k' AS via" in row[0]]
        assert unions and all(g >= 1 and c == 0 for _, g, c in prepared), prepared
        # A generic plan over a parent would lock every partition: none is named here.
        parents = re.compile(r"\b(memories|memory_stats|memory_entities|messages)\b(?!_)")
        assert not [st for st, _, _ in prepared if parents.search(st.replace(" AS memories", ""))]
        # Users who share their partitions ran their candidates elsewhere (custom plans).
        assert len(unions) <= len(alone) and len(keyword) <= len(alone)
        s._tables = lambda user, **_: pgb.PARENTS  # type: ignore[method-assign]
        for user in users:
            found, history = mine[user]
            assert reads(user) == mine[user]
            assert len(found) == 2 and len(history) == 4  # 10 tokens: 3 + 3 + 3 (+ 1 over)
            assert all(f.memory.user_id == user for f in found.values())
    finally:
        s.close()


def test_pg_own_partitions_under_row_level_security_hold_only_the_acting_users_rows() -> None:
    """An authenticated request's memory candidates for its own user come from that
    user's partitions, whose own policies (migration 009) show memd_app the acting user's
    rows only: prepared in the request's transaction and run with their generic plan for
    a user alone in their partitions, planned per call for one who shares them; either
    way what the parents' policies give. A leaf read directly as memd_app shows no other
    user's row, and takes no write."""
    import psycopg

    from memd.backends import postgres as pgb

    s = pgb.PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        s.check_row_security()
        guarded = s._rows(
            "SELECT c.relname, c.relrowsecurity, (SELECT count(*) FROM pg_policies p "
            "WHERE p.tablename = c.relname AND p.policyname = 'memd_own_rows') "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname IN "
            "('memories_working', 'memories_durable', 'memory_stats', 'memory_entities')")
        assert len(guarded) == 4 * 32 and all(rls and n == 1 for _, rls, n in guarded)
        alice = s._tables("alice")  # no request: computed as the owner
        bob = next(u for u in (f"bob{i}" for i in range(200))
                   if s._tables(u).memory_leaves != alice.memory_leaves)
        carol = next(u for u in (f"carol{i}" for i in range(2000))
                     if s._tables(u).memory_leaves == alice.memory_leaves)
        now = time.time()
        flt = MemoryFilter(now=now, workspaces=("team", ""))
        kw: dict[str, Any] = dict(knn_k=5, keyword_k=5, entities=["rust"], entity_k=5,
                                  frequent_k=5)
        for user in ("alice", bob):
            s.create_user(user, user, 1.0)
            s.add_workspace_member("team", user, 1.0)

        def add(user: str, text: str, workspace: str | None = None) -> Memory:
            made = s.insert_memory(memory(text, user=user, workspace=workspace,
                                          entities=("rust",)), vec(len(text) % DIM))
            s.link_entities(user, made.id, ["rust"])
            s.record_access(user, [(made.id, 1.0)], now)
            return made

        mine = {add("alice", "alice's rust notes").id,
                add("alice", "alice's team rust notes", "team").id}
        add(bob, "bob's private rust notes")
        add(bob, "bob's team rust notes", "team")

        def candidates() -> dict[str, Any]:
            with acting_as("alice"), s.read_batch():
                return s.memory_candidates("alice", "rust notes", vec(0), flt, **kw)

        def through_parents() -> dict[str, Any]:
            s._tables = lambda user, **_: pgb.PARENTS  # type: ignore[method-assign]
            try:
                return candidates()
            finally:
                del s._tables

        def prepared() -> list[tuple[str, int, int]]:
            pool = s._pool
            conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
            try:
                return [row for conn in conns for row in conn.execute(
                    "SELECT statement, generic_plans, custom_plans "
                    "FROM pg_prepared_statements WHERE statement LIKE '%%UNION ALL%%'")]
            finally:
                for conn in conns:
                    pool.putconn(conn)

        assert s._sole_owner("alice", alice)
        found = candidates()
        assert set(found) == mine and found == through_parents()
        unions = prepared()
        assert unions and all(g >= 1 and c == 0 for _, g, c in unions), unions
        assert all(alice.memory_leaves[1] in st for st, _, _ in unions)
        # carol shares alice's partitions: alice's candidates are planned per call now,
        # and carol's rows stay out of them.
        add(carol, "carol's rust notes")
        s._sole_owners.clear()
        assert not s._sole_owner("alice", alice)
        found = candidates()
        assert set(found) == mine and found == through_parents()
        with s._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT set_config('role', 'memd_app', true), "
                         "set_config('memd.user_id', 'alice', true)")
            for leaf in (*alice.memory_leaves, alice.memory_stats, alice.memory_entities):
                users = {r[0] for r in conn.execute(f"SELECT user_id FROM {leaf}")}
                assert users <= {"alice"}, (leaf, users)
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(f"DELETE FROM {alice.memory_stats}")
            # The keyword probe over own leaves (migration 011) runs as the owner: it
            # answers for the acting user only, over memory partitions only.
            probe = ("SELECT memory_id FROM memd_keyword_own_memory_top(%s, %s, %s, "
                     "websearch_to_tsquery('english', 'rust'), 50, true, NULL, false, NULL, "
                     "NULL, NULL, NULL, NULL)")
            hits = {r[0] for r in conn.execute(probe, ("alice", *alice.memory_leaves))}
            assert hits == mine  # carol's rust notes share the leaves, not the answer
            for args in (("carol", *alice.memory_leaves),
                         (bob, *s._tables(bob).memory_leaves)):
                with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                    conn.execute(probe, args)
            for leaves in ((alice.memory_stats, alice.memory_leaves[1]),
                           (alice.memory_leaves[1], alice.memory_leaves[0]),
                           ("api_keys", "users"), ('x"; DROP TABLE users; --', "y")):
                with pytest.raises(psycopg.errors.InvalidParameterValue), conn.transaction():
                    conn.execute(probe, ("alice", *leaves))
    finally:
        s.close()


def test_pg_own_leaves_keyword_probe_applies_the_whole_filter() -> None:
    """Under row-level security the keyword channel over a user's own leaves takes the
    probe's top k (memd_keyword_own_memory_top, migration 011), so the probe must apply
    every part of the filter the statement does: for each filter the keyword hits are
    those of the unauthenticated statement, though higher-ranked rows that the filter
    hides (inactive, superseded, expired, another session's, another tier, scope or
    workspace, without the tag) would fill a top k taken before it."""
    from memd.backends import postgres as pgb

    s = pgb.PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        s.create_user("alice", "alice", 1.0)
        now = time.time()
        here, there = "s-here", "s-there"
        loud = "rust rust rust rust notes"  # ranks above every "rust notes"
        hidden = [
            dict(is_active=False), dict(superseded_by="m-newer"), dict(expires_at=now - 60),
            dict(scope=Scope.LOCAL, session_id=there), dict(tier=Tier.EPISODIC),
            dict(workspace="elsewhere"),
        ]
        for kw in hidden:
            s.insert_memory(memory(loud, **kw), vec(1))
        shown = {s.insert_memory(memory(f"rust notes {i}", tags=("lang",)), vec(2)).id
                 for i in range(3)}
        shown.add(s.insert_memory(memory("rust notes here", scope=Scope.LOCAL,
                                         session_id=here, tags=("lang",)), vec(2)).id)
        filters = [
            MemoryFilter(now=now, workspaces=("",), session_id=here,
                         tiers=(Tier.SEMANTIC,), tags=("lang",)),
            MemoryFilter(now=now, workspaces=("",), session_id=here, scope=Scope.GLOBAL),
            MemoryFilter(now=now, workspaces=("",), session_id=here),
        ]

        def keyword_hits(flt: MemoryFilter, actor: str | None) -> dict[str, float]:
            with acting_as(actor), s.read_batch():
                found = s.memory_candidates("alice", "rust", vec(0), flt, knn_k=1,
                                            keyword_k=2)
            return {mid: f.keyword for mid, f in found.items() if f.keyword > 0}

        assert set(keyword_hits(filters[0], None)) <= shown  # every loud one hidden
        assert not set(keyword_hits(filters[2], None)) <= shown  # the other tier's shows
        for flt in filters:
            plain = keyword_hits(flt, None)
            assert len(plain) == 2 and keyword_hits(flt, "alice") == plain, flt
        wide = MemoryFilter(include_inactive=True, include_superseded=True,
                            include_expired=True)
        assert len(keyword_hits(wide, "alice")) == 2
        assert set(keyword_hits(wide, "alice")).isdisjoint(shown)  # the loud ones now
    finally:
        s.close()


def test_pg_own_partitions_are_not_read_for_another_user_under_row_level_security(
    pg_store: Any,
) -> None:
    """An authenticated request naming another user reads through the parents, whose
    policies bind it: bob's private memories stay out of alice's request."""
    s = pg_store
    s.insert_memory(memory("bob's private rust notes", user="bob"), vec(0))
    flt = MemoryFilter()
    kw: dict[str, Any] = dict(knn_k=5, keyword_k=5, entities=["rust"], entity_k=5,
                              frequent_k=5)
    assert len(s.memory_candidates("bob", "rust notes", vec(0), flt, **kw)) == 1
    with acting_as("alice"):
        assert s.memory_candidates("bob", "rust notes", vec(0), flt, **kw) == {}
    with s.transaction():  # a transaction's own write is seen by its reads
        made = s.insert_memory(memory("fresh rust notes", user="bob"), vec(1))
        assert made.id in s.memory_candidates("bob", "rust notes", vec(1), flt, **kw)
    with s.read_batch(), s.transaction():  # also one opened inside a read batch
        made = s.insert_memory(memory("newer rust notes", user="bob"), vec(2))
        assert made.id in s.memory_candidates("bob", "rust notes", vec(2), flt, **kw)


@contextmanager
def _protocol_trace(pool: Any) -> Iterator[list[str]]:
    """The libpq trace of every connection of ``pool`` while the block runs: one line a
    protocol message, "F" for the client's, "B" for the server's."""
    import tempfile

    from psycopg import pq

    lines: list[str] = []
    conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
    with tempfile.TemporaryFile("w+") as f:
        for conn in conns:
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            pool.putconn(conn)
        try:
            yield lines
        finally:
            conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
            for conn in conns:
                conn.pgconn.untrace()
                pool.putconn(conn)
            f.seek(0)
            lines += f.read().splitlines()


def test_pg_a_read_as_an_acting_user_is_one_round_trip_and_leaves_no_setting(
    pg_store: Any,
) -> None:
    """Under row-level security a read outside a transaction sends the role settings and
    its statement in one pipeline: one round trip (one ReadyForQuery, no BEGIN or
    COMMIT), in read batches too; its statement runs as memd_app for the acting user,
    and the pooled connection is back to the owner's role and no user after it."""
    s = pg_store
    s.check_row_security()
    s.create_session(session("alice", "s-a"))
    s.create_session(session("bob", "s-b"))
    whoami = "SELECT current_user::text, current_setting('memd.user_id', true)"
    with _protocol_trace(s._pool) as trace, acting_as("alice"):
        assert s._rows(whoami) == [("memd_app", "alice")]
        assert s.get_session("alice", "s-a") is not None
        assert s.get_session("bob", "s-b") is None  # bob's row: not the actor's
        with s.read_batch():
            assert s.get_facts("alice") == []
            assert s.get_session("alice", "s-a") is not None
    ready = [line for line in trace if "\tReadyForQuery" in line]
    assert len(ready) == 5, trace
    assert not [line for line in trace if "BEGIN" in line or "COMMIT" in line], trace
    owner = s._rows(whoami)[0]
    assert owner[0] != "memd_app" and not owner[1]
    assert s.get_session("bob", "s-b") is not None


def test_pg_repeated_queries_keep_pruning_partitions() -> None:
    """psycopg prepares a statement once it has run 5 times; a generic plan for it would
    open (and lock) every partition, which at the production layout's thousands of leaves
    exhausts max_locks_per_transaction. The store keeps custom plans: the 30th run of
    the history query (prepared after 5, then planned
    generic after 5 more by default) still locks only the user's partition of each table."""
    from memd.backends.postgres import PostgresStore

    s = PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        sess = s.create_session(session())
        s.append_messages("alice", sess.id, [NewMessage("user", "hi")], [1], [None],
                          time.time())
        with s.transaction():
            conn = s._current()
            for _ in range(30):
                assert len(s.get_messages("alice", sess.id, limit=5)) == 1
            locked = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE l.pid = pg_backend_pid() AND c.relname LIKE 'messages%%'"
            ).fetchone()[0]
        assert 0 < locked < 200, locked  # one hash partition: its months and indexes
    finally:
        s.close()


# -- calls: what the proxy recorded ------------------------------------------------------
def _record_calls(store: Store) -> None:
    """Alice's calls c1..c5 (c3 and c4 made at the same instant) and one of bob's."""
    for call_id, created, sid, ws in (("c1", 100.0, "s1", None), ("c2", 200.0, "s2", "proj"),
                                      ("c3", 300.0, "s1", "proj"), ("c4", 300.0, "s2", None),
                                      ("c5", 400.0, "s1", None)):
        store.record_call(call_id, "alice", sid, ws, "gpt-x", created,
                          {"tokens": {"memory": int(created)}})
    store.record_call("b1", "bob", "s1", None, "gpt-x", 250.0, {})


def _ids(calls: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in calls]


def test_calls_list_newest_first_shaped_as_get_call(store: Store) -> None:
    _record_calls(store)
    store.finish_call("c2", 502, {"error": "upstream down"})
    listed = store.list_calls("alice")
    assert _ids(listed) == ["c5", "c4", "c3", "c2", "c1"]  # the tie: higher call id first
    assert listed == [store.get_call("alice", c["id"]) for c in listed]
    c2 = listed[3]
    assert c2 == {"id": "c2", "user_id": "alice", "session_id": "s2", "workspace": "proj",
                  "model": "gpt-x", "created_at": 200.0, "status": 502,
                  "report": {"tokens": {"memory": 200}},
                  "metadata": {"error": "upstream down"}}
    assert listed[0]["workspace"] is None and listed[0]["status"] is None
    assert _ids(store.list_calls("bob")) == ["b1"]
    assert store.list_calls("carol") == []


def test_calls_list_filters_and_limit(store: Store) -> None:
    _record_calls(store)
    assert _ids(store.list_calls("alice", session_id="s1")) == ["c5", "c3", "c1"]
    assert _ids(store.list_calls("alice", since=200.0)) == ["c5", "c4", "c3", "c2"]
    assert _ids(store.list_calls("alice", until=300.0)) == ["c2", "c1"]
    assert _ids(store.list_calls("alice", since=150.0, until=350.0)) == ["c4", "c3", "c2"]
    assert _ids(store.list_calls("alice", workspace="proj")) == ["c3", "c2"]
    assert store.list_calls("alice", workspace="other") == []
    assert _ids(store.list_calls("alice", session_id="s1", workspace="proj",
                                 since=300.0)) == ["c3"]
    assert _ids(store.list_calls("alice", limit=2)) == ["c5", "c4"]
    assert _ids(store.list_calls("alice", session_id="s1", limit=1)) == ["c5"]
    assert store.list_calls("bob", session_id="s2") == []


def test_pg_calls_list_under_row_level_security(pg_store: Any) -> None:
    """A request authenticated as alice lists her calls; bob's stay invisible to it even
    when it names bob, because the policies bind the statement, not just its filter."""
    s = pg_store
    s.check_row_security()
    _record_calls(s)
    with acting_as("alice"):
        assert _ids(s.list_calls("alice", since=300.0)) == ["c5", "c4", "c3"]
        assert s.list_calls("bob") == []
        with s.read_batch():
            assert _ids(s.list_calls("alice", workspace="proj")) == ["c3", "c2"]
    assert _ids(s.list_calls("bob")) == ["b1"]  # the owner, outside a request, sees it
