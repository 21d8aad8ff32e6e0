"""The SQLite backend's own workings, beyond the Store contract (test_store_contract.py):
its migrations, the in-memory message vectors, the side connection that ranks full-text
matches, reindexing an older data dir, secure deletion and the WAL checkpoints."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_data import DIM, memory, session, vec

from memd.errors import MigrationError
from memd.types import Found, MemoryFilter, NewMessage


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    s.insert_memory(memory("kept across reopen"), vec(0))
    s.close()
    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    assert s.get_memory("alice", s.list_memories("alice", MemoryFilter())[0].id) is not None
    files = list((Path(__file__).parent.parent / "memd" / "sql" / "sqlite").glob("[0-9]*.sql"))
    numbers = sorted(int(f.name.split("_", 1)[0]) for f in files)
    assert numbers == list(range(1, len(files) + 1)) and len(files) >= 6
    assert s.schema_version() == len(files)
    s.close()
    with pytest.raises(MigrationError, match="8-dim"):
        SQLiteStore(tmp_path / "m.db", dim=16)


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
        s.connection.drop_caches()
        assert s.vectors._cached_message_vectors("alice") is not None  # loaded: from memory
        fast = [(m.id, round(x, 5)) for m, x in s.nearest_messages("alice", query, 8, session_id)]
        monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 1)
        s.connection.drop_caches()
        assert s.vectors._cached_message_vectors("alice") is None  # over the bound: vec0
        slow = [(m.id, round(x, 5)) for m, x in s.nearest_messages("alice", query, 8, session_id)]
        return fast, slow

    for sid in (None, sessions[1].id):
        fast, slow = both(sid)
        assert fast == slow and len(fast) == (8 if sid is None else 7)
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 25)
    s.connection.drop_caches()
    # early searches answer from vec0; the second starts loading the vectors in a thread
    first = s.nearest_messages("alice", query, 8)
    assert not s.vectors._message_loads
    again = s.nearest_messages("alice", query, 8)
    assert [m.id for m, _ in first] == [m.id for m, _ in again]
    assert [x for _, x in first] == pytest.approx([x for _, x in again], abs=1e-5)
    deadline = time.monotonic() + 10
    while s.vectors.message_vectors.get("alice") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(s.vectors.message_vectors["alice"].ids) == 20  # type: ignore[union-attr]
    s.set_message_embeddings("alice", list(zip(ids[20:], vecs[20:], strict=True)))
    assert s.vectors.message_vectors["alice"] is None  # 30 > 25: vec0 again
    near = s.nearest_messages("alice", vecs[25], 1)
    assert near[0][0].id == ids[25] and near[0][1] == pytest.approx(1.0, abs=1e-5)
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 4096)
    s.connection.drop_caches()
    s.vectors._cached_message_vectors("alice")
    s.set_message_embeddings("alice", [(ids[0], vecs[29])])  # re-embedded: cache follows
    top2 = s.nearest_messages("alice", vecs[29], 2)  # ids[29] has the same vector
    assert {m.id for m, _ in top2} == {ids[0], ids[29]}
    s.close()


def test_message_vectors_load_from_vec0_storage_as_vec0_holds_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's message vectors read from vec0's own storage are those vec0 holds for
    that user: every live one with its message and session, after re-embeddings and
    deletes, past vec0's largest k too; a table of another layout loads through a
    KNN, and a user over the bound is left to vec0."""
    import memd.backends.sqlite.vectors as sq
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    rng = np.random.default_rng(9)
    old, new = s.create_session(session()), s.create_session(session())
    bobs = s.create_session(session("bob"))
    n = sq.VEC0_K_MAX + 300
    said = [NewMessage("user", f"m{i}") for i in range(n)]
    mine = (s.append_messages("alice", old.id, said[:300], [1] * 300, [None] * 300, 1.0)
            + s.append_messages("alice", new.id, said[300:], [1] * (n - 300),
                                [None] * (n - 300), 5.0))
    theirs = s.append_messages("bob", bobs.id, said[:50], [1] * 50, [None] * 50, 1.0)

    def unit(k: int) -> np.ndarray:
        v = rng.normal(size=(k, DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    # bob's vectors between alice's, so that chunks of both users interleave
    s.set_message_embeddings("alice", [(m.id, v) for m, v in zip(mine[:200], unit(200),
                                                                  strict=True)])
    s.set_message_embeddings("bob", [(m.id, v) for m, v in zip(theirs, unit(50), strict=True)])
    s.set_message_embeddings("alice", [(m.id, v) for m, v in zip(mine[200:], unit(n - 200),
                                                                  strict=True)])
    s.set_message_embeddings("alice", [(m.id, v) for m, v in zip(mine[::7], unit(len(mine[::7])),
                                                                  strict=True)])  # again
    s.delete_inactive_messages("alice", 2.0)  # the old session's 300 go

    def held(user: str) -> list[tuple[str, bytes, str]]:  # vec0's full scan
        return sorted(s.connection.rows(
            "SELECT message_id, embedding, session_id FROM message_vec WHERE user_id = ?",
            (user,)))

    def loaded(user: str) -> list[tuple[str, bytes, str]]:
        count, got = s.vectors._partition_vectors(user)  # type: ignore[misc]
        assert got is not None and count == len(got.ids)
        codes = {c: w for w, c in got.ws_codes.items()}
        return sorted((mid, got.mat[i].astype(np.float32).tobytes(), codes[int(got.ws[i])])
                      for i, mid in enumerate(got.ids))

    for user in ("alice", "bob"):
        assert loaded(user) == held(user)
    assert len(held("alice")) == n - 300 > 0
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 100)
    assert s.vectors._partition_vectors("alice") == (n - 300, None)  # counted, not read
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 10**6)
    assert s.vectors._cached_message_vectors("alice") is not None
    assert len(s.vectors.message_vectors["alice"].ids) == n - 300  # type: ignore[union-attr]
    # a table this does not know the storage of: a KNN loads what fits in its k
    monkeypatch.setattr(sq, "SHADOW_LAYOUT", (9, 9))
    s.connection.drop_caches()
    assert s.vectors._partition_vectors("bob") is None
    assert s.vectors._cached_message_vectors("alice") is None  # more than vec0's k
    assert len(s.vectors._cached_message_vectors("bob").ids) == 50  # type: ignore[union-attr]
    s.close()


def test_signed_vectors_find_the_nearest_through_their_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A large history's message vectors as hyperplane bits and float16 copies: with a
    tenth of them ordered by cosine, the 10 nearest of an exact search are found, with
    the same cosines; the session filter holds; a vector embedded after the load is found
    and a removed one is not; the copies take under half the memory."""
    import memd.backends.sqlite.held as sq

    rng = np.random.default_rng(3)
    dim, n = 384, 4000
    centers = rng.normal(size=(40, dim))  # topics, as a conversation's turns have
    vecs = (centers[rng.integers(0, 40, n)] + rng.normal(size=(n, dim)) * 0.8
            ).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"m{i}" for i in range(n)]
    sessions = [f"s{i % 7}" for i in range(n)]
    exact = sq.UserVectors.stacked(dim, ids, sessions, [vecs])
    signed = sq.SignedVectors.stacked(dim, ids, sessions, [vecs[:1000], vecs[1000:]])
    monkeypatch.setattr(sq, "RERANK", n // 10)
    monkeypatch.setattr(sq, "RERANK_PER_K", 1)
    queries = vecs[rng.choice(n, 50, replace=False)] + rng.normal(size=(50, dim)) * 0.03
    found = []
    for q in queries.astype(np.float32):
        want = dict(exact.knn(q, 10, False, None))
        got = signed.knn(q, 10, False, None)
        found.append(len(want.keys() & {mid for mid, _ in got}) / 10)
        assert [x for _, x in got] == sorted((x for _, x in got), reverse=True)
        for mid, x in got:
            assert x == pytest.approx(float(vecs[int(mid[1:])] @ q), abs=2e-3)
    assert np.mean(found) >= 0.9
    q = queries[0].astype(np.float32)
    in_s3 = signed.knn(q, 10, False, ["s3"])
    assert len(in_s3) == 10 and all(sessions[int(mid[1:])] == "s3" for mid, _ in in_s3)
    new = rng.normal(size=dim).astype(np.float32)
    signed.upsert("new", new / np.linalg.norm(new), "s1", True)
    assert signed.knn(new, 1, False, None)[0][0] == "new"
    signed.remove("new")
    assert "new" not in {mid for mid, _ in signed.knn(new, 5, False, None)}
    assert signed.nbytes < exact.nbytes / 2


def test_a_repeated_search_filter_sees_every_change_to_the_vectors() -> None:
    """A search keeps the mask its filter made (activity, workspaces) for the next
    search of the same filter, and each change to the vectors makes a new one: a
    memory deactivated, added, removed or moved to another workspace after a search is
    found, or not, by the next search with the same filter."""
    import memd.backends.sqlite.held as sq

    rng = np.random.default_rng(5)
    vecs = rng.normal(size=(6, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"m{i}" for i in range(6)]
    held = sq.UserVectors.stacked(384, ids, ["a", "a", "a", "b", "b", ""], [vecs])

    def found(workspaces: list[str] | None = ["a", ""]) -> set[str]:  # noqa: B006
        return {mid for mid, _ in held.knn(vecs[0], 10, True, workspaces)}

    assert found() == {"m0", "m1", "m2", "m5"}
    held.set_active("m1", False)
    assert found() == {"m0", "m2", "m5"}
    held.upsert("m6", vecs[3], "a", True)
    assert found() == {"m0", "m2", "m5", "m6"}
    held.remove("m2")
    assert found() == {"m0", "m5", "m6"}
    held.upsert("m3", vecs[3], "a", True)  # moved from workspace b
    assert found() == {"m0", "m3", "m5", "m6"}
    assert found(["b"]) == {"m4"}
    assert found(None) == {"m0", "m3", "m4", "m5", "m6"}
    held.set_active("m1", True)
    assert found(["b"]) == {"m4"} and "m1" in found()


def test_signed_vectors_find_sparse_vectors_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake embedder's vectors (a few hashed words each, half of them negative) are
    found as well: the bits are sides of random hyperplanes, where each coordinate's own
    sign finds a third of the 10 nearest."""
    import memd.backends.sqlite.held as sq
    from memd.models.embedder import FakeEmbedder

    rng = np.random.default_rng(4)
    topics = [rng.choice(2000, 60, replace=False) for _ in range(40)]

    def texts(n: int, words: int) -> list[str]:
        return [" ".join(f"w{j}" for j in np.concatenate([
            rng.choice(topics[rng.integers(40)], words - 3), rng.choice(2000, 3)]))
            for _ in range(n)]

    fake = FakeEmbedder()
    n = 4000
    vecs = fake.embed(texts(n, 20)).astype(np.float32)
    ids = [f"m{i}" for i in range(n)]
    exact = sq.UserVectors.stacked(384, ids, [""] * n, [vecs])
    signed = sq.SignedVectors.stacked(384, ids, [""] * n, [vecs])
    monkeypatch.setattr(sq, "RERANK", n // 10)
    monkeypatch.setattr(sq, "RERANK_PER_K", 1)
    found = [len({mid for mid, _ in exact.knn(q, 10, False, None)}
                 & {mid for mid, _ in signed.knn(q, 10, False, None)}) / 10
             for q in fake.embed(texts(50, 8)).astype(np.float32)]
    assert np.mean(found) >= 0.85


def test_a_history_past_the_exact_bound_is_searched_through_bits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MESSAGE_EXACT_USER a user's message vectors load as SignedVectors (from
    vec0's storage, or when the exact copy grows past the bound, at the next load), and
    answer as vec0 does where every vector is reranked; the bytes held bound the cache."""
    import memd.backends.sqlite.vectors as sq
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    rng = np.random.default_rng(5)
    sid = s.create_session(session()).id
    said = s.append_messages("alice", sid, [NewMessage("user", f"m{i}") for i in range(40)],
                             [1] * 40, [None] * 40, 1.0)
    vecs = rng.normal(size=(40, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    s.set_message_embeddings("alice", [(m.id, v) for m, v in zip(said[:20], vecs[:20],
                                                                  strict=True)])
    monkeypatch.setattr(sq, "MESSAGE_EXACT_USER", 25)
    assert type(s.vectors._cached_message_vectors("alice")) is sq.UserVectors
    s.set_message_embeddings("alice", [(m.id, v) for m, v in zip(said[20:], vecs[20:],
                                                                  strict=True)])
    assert "alice" not in s.vectors.message_vectors  # grown past 25: loaded again
    assert type(s.vectors._cached_message_vectors("alice")) is sq.SignedVectors
    query = vecs[3] + 0.5 * vecs[30]
    query /= np.linalg.norm(query)
    fast = [(m.id, round(x, 2)) for m, x in s.nearest_messages("alice", query, 8)]
    assert fast[0][0] == said[3].id and {said[30].id} <= {mid for mid, _ in fast}
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 1)
    s.connection.drop_caches()
    slow = [(m.id, round(x, 2)) for m, x in s.nearest_messages("alice", query, 8)]
    assert fast == slow
    monkeypatch.setattr(sq, "MESSAGE_CACHE_USER", 10**6)
    s.set_message_embeddings("bob", [(m.id, v) for m, v in zip(
        s.append_messages("bob", s.create_session(session("bob")).id,
                          [NewMessage("user", "b")], [1], [None], 1.0), vecs[:1],
        strict=True)])
    s.connection.drop_caches()
    s.vectors._cached_message_vectors("alice")
    monkeypatch.setattr(sq, "MESSAGE_CACHE_BYTES", 1)
    s.vectors._cached_message_vectors("bob")
    assert list(s.vectors.message_vectors) == ["bob"]  # over the bytes: alice dropped
    s.close()


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
    rank = s.memories.side.rank

    def spy(match: str, limit: int) -> list[tuple[str, float]]:
        threads.append(threading.current_thread().name)
        workers.add(threading.current_thread())
        return rank(match, limit)

    s.memories.side.rank = spy  # type: ignore[method-assign]
    for i, text in enumerate(["rust compiler errors", "python rust bindings", "tea",
                              "rust borrow checker", "coffee"]):
        s.insert_memory(memory(text, importance=0.1 * i), vec(i % DIM))
    flt = MemoryFilter(now=20.0)
    kw: dict[str, Any] = dict(knn_k=1, keyword_k=3, frequent_k=0)

    def in_line() -> dict[str, Found]:
        s.memories._start_side_ranking = lambda *_: None  # type: ignore[method-assign]
        try:
            return s.memory_candidates("alice", "rust", vec(2), flt, **kw)
        finally:
            del s.memories._start_side_ranking

    got = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert threads == ["memd-sqlite-side_0"]
    assert got == in_line() and sum(f.keyword > 0 for f in got.values()) == 3
    with s.transaction():  # uncommitted: only the store's own connection sees it
        fresh = s.insert_memory(memory("zanzibar, in a transaction"), vec(7))
        assert s.memory_candidates("alice", "zanzibar", vec(2), flt, **kw)[fresh.id].keyword == 1
    assert len(threads) == 1
    with s.memories.side.lock:  # busy with another caller's ranking
        assert s.memory_candidates("alice", "rust", vec(2), flt, **kw) == in_line()
    assert len(threads) == 1
    assert s.memory_candidates("alice", "zanzibar", vec(2), flt, **kw)[fresh.id].keyword == 1
    assert len(threads) == 2
    s.close()
    assert workers and not any(t.is_alive() for t in workers)


def test_sqlite_side_reads_run_on_a_connection_of_their_own(tmp_path: Path) -> None:
    """A worker thread's side reads run on a read-only connection of that thread's own,
    without the store's lock: while another thread holds the lock in a transaction they
    answer at once, with the last commit (not the transaction's writes). In a
    transaction of its own, a thread reads on the store's connection and sees its
    writes. Closing the store closes the side connections; a store in memory has none."""
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "side_reads.db", dim=DIM)
    assert s.concurrent_reads
    kept = s.insert_memory(memory("committed before"), vec(1))
    in_transaction, done = threading.Event(), threading.Event()

    def write() -> None:
        with s.transaction():
            s.insert_memory(memory("not committed yet"), vec(2))
            in_transaction.set()
            done.wait(timeout=30)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert in_transaction.wait(timeout=30)
        seen: list[list[str]] = []

        def side() -> None:
            with s.side_reads():
                seen.append([m.text for m in s.list_memories("alice", MemoryFilter())])

        reader = threading.Thread(target=side)
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "a side read waited for another thread's transaction"
        assert seen == [[kept.text]]
    finally:
        done.set()
        writer.join(timeout=30)
    with s.side_reads(), s.transaction():
        own = s.insert_memory(memory("this thread's own write"), vec(3))
        assert s.get_memory("alice", own.id) is not None
    readers = list(s.connection._readers)
    assert len(readers) == 1
    s.close()
    with pytest.raises(Exception, match="closed"):
        readers[0].execute("SELECT 1")
    in_memory = SQLiteStore(":memory:", dim=DIM)
    assert not in_memory.concurrent_reads
    with in_memory.side_reads():
        assert in_memory.list_memories("alice", MemoryFilter()) == []
    assert in_memory.connection._readers == []
    in_memory.close()


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
            s.connection.write(f"DROP TABLE {table}")
            # SQLite 3.54 leaves a contentless_unindexed table's _content shadow behind
            s.connection.write(f"DROP TABLE IF EXISTS {table}_content")
        s.connection.write("CREATE VIRTUAL TABLE memories_fts USING fts5(content_text, owner, "
             "memory_id UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2')")
        s.connection.write("CREATE VIRTUAL TABLE messages_fts USING fts5(content, owner, "
             "session_id UNINDEXED, message_id UNINDEXED, tokenize = 'porter unicode61 "
             "remove_diacritics 2')")
        s.connection.write("DELETE FROM schema_migrations WHERE version = 5")
    s.close()
    s = SQLiteStore(tmp_path / "old.db", dim=DIM)
    assert s.connection.rows("SELECT count(*) FROM schema_migrations WHERE version = 5")[0][0] == 1
    assert [x.id for x, _ in s.keyword_memories("alice", "docker", 5, MemoryFilter())] == [m.id]
    assert [x.content for x, _ in s.keyword_messages("alice", "kubernetes", 5)] \
        == ["the cluster runs kubernetes"]
    # contentless: the index keeps no copy of the text
    assert s.connection.rows("SELECT content_text FROM memories_fts") == [(None,), (None,)]
    s.close()


def test_sqlite_forget_leaves_no_readable_bytes(tmp_path: Path) -> None:
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "f.db", dim=DIM)
    m = s.insert_memory(memory("xylophone-secret-4242"), vec(0))
    s.delete_memory("alice", m.id)
    s.connection.rows("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"xylophone-secret-4242" not in blob


def test_sqlite_checkpoint_moves_the_wal_into_the_database(tmp_path: Path) -> None:
    import apsw

    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "c.db", dim=DIM)
    for i in range(50):
        s.insert_memory(memory(f"note {i}"), vec(i % DIM))
    probe = apsw.Connection(str(tmp_path / "c.db"))
    busy, frames, done = probe.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()
    assert frames > 0 and done < frames  # the writes sit in the WAL
    s.connection.checkpoint()
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
    s.connection.checkpoint_pages = 40
    ran_on: list[str] = []
    checkpoint = s.connection.checkpoint

    def recorded() -> None:
        ran_on.append(threading.current_thread().name)
        checkpoint()

    s.connection.checkpoint = recorded  # type: ignore[method-assign]
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
            if done == frames or frames < s.connection.checkpoint_pages:
                break
            time.sleep(0.01)
        assert len(ran_on) >= 3 and set(ran_on) == {"memd-sqlite-checkpoint"}, ran_on
        assert done == frames or frames < s.connection.checkpoint_pages, (done, frames)
        wal = (tmp_path / "c.db-wal").stat().st_size // 4096
        assert wal < 10 * 40 + 100, wal  # restarted, not 300 writes long (~6,600 pages)
    finally:
        probe.close()
        s.close()
    assert not s.connection._checkpoint_thread.is_alive()  # type: ignore[union-attr]


def test_keyword_messages_ranks_a_bounded_part_of_a_long_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond RANK_ALL matches the message keyword channel ranks those of the query's
    rarest words, at any age, by the whole query's bm25 (so in the whole ranking's
    order); a query of common words only, its newest matches. Up to RANK_ALL, every
    match is ranked."""
    import memd.backends.sqlite.messages as sm
    from memd.backends.sqlite import SQLiteStore

    s = SQLiteStore(tmp_path / "m.db", dim=DIM)
    sess = s.create_session(session())
    texts = ["an old note on the quokka migration and the build",  # rare + common, oldest
             "the quokka alone",  # rare word only, old
             "build build build build build failed once more"]  # common only, old
    texts += [f"the build step {i} ran {'again ' * (i % 5)}" for i in range(40)]
    texts += ["build server logs", "deploy of the build today"]  # the newest
    msgs = s.append_messages("alice", sess.id, [NewMessage("user", t) for t in texts],
                             [1] * len(texts), [None] * len(texts), 1.0)
    by_id = {m.id: m.content for m in msgs}

    def ranked(query: str, k: int = 100) -> list[str]:
        return [by_id[m.id] for m, _ in s.keyword_messages("alice", query, k)]

    whole = ranked("quokka build")  # 45 matches: every one ranked
    assert len(whole) == len(texts) and set(whole[:2]) == set(texts[:2])
    assert texts[2] in whole[:3]
    monkeypatch.setattr(sm, "RANK_ALL", 45)  # every match still ranked
    assert ranked("quokka build") == whole
    monkeypatch.setattr(sm, "RANK_ALL", 10)
    monkeypatch.setattr(sm, "RARE_MATCHES", 3)
    monkeypatch.setattr(sm, "NEWEST_MATCHES", 5)
    # quokka's 2 matches (within 3), ranked as in the whole ranking: the first holds
    # "build" too, which counts in its score; the 43 of build alone are not ranked
    assert ranked("quokka build") == [t for t in whole if "quokka" in t]
    assert ranked("quokka build", 1) == whole[:1]
    newest = ranked("build")
    assert set(newest) == set(texts[-5:]) and texts[2] not in newest
    assert newest == [t for t in ranked("build", 100) if t in newest]
    monkeypatch.setattr(sm, "RARE_MATCHES", 1)  # quokka's 2 matches are too many
    assert set(ranked("quokka build")) == set(texts[-5:])
    s.close()


def test_the_most_accessed_memories_are_read_again_only_after_a_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """list_memories by access count (each compile's frequent channel) answers from
    memory while nothing changed the file, the same for every session of a global
    filter; a write, another connection's commit or a memory's expiry is seen at once."""
    from memd.backends.common.memories import SharedMemories
    from memd.backends.sqlite import SQLiteStore
    from memd.types import Scope

    s = SQLiteStore(tmp_path / "a.db", dim=DIM)
    mems = [s.insert_memory(memory(f"m{i}", access_count=i,
                                   expires_at=50.0 if i == 9 else None), vec(i % DIM))
            for i in range(10)]
    reads: list[int] = []
    real = SharedMemories.list_memories

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        reads.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(SharedMemories, "list_memories", counted)

    def top(now: float = 20.0, session_id: str = "s1", scope: Scope | None = Scope.GLOBAL
            ) -> list[str]:
        flt = MemoryFilter(scope=scope, session_id=session_id, now=now)
        return [m.text for m in s.list_memories("alice", flt, limit=3, order="access_count")]

    assert top() == ["m9", "m8", "m7"] and len(reads) == 1
    assert top(30.0, "s2") == ["m9", "m8", "m7"] and len(reads) == 1  # from memory
    assert top(scope=None) == ["m9", "m8", "m7"] and len(reads) == 2  # another filter
    assert top(60.0) == ["m8", "m7", "m6"] and len(reads) == 3  # m9 expired meanwhile
    s.record_access("alice", [(mems[0].id, 1.0, 100)], 60.0)
    assert top(60.0) == ["m0", "m8", "m7"] and len(reads) == 4
    other = SQLiteStore(tmp_path / "a.db", dim=DIM)  # another process, in effect
    other.record_access("alice", [(mems[1].id, 1.0, 200)], 60.0)
    other.close()
    assert top(60.0) == ["m1", "m0", "m8"] and len(reads) == 5
    with s.transaction():  # in a transaction: read, not kept
        s.record_access("alice", [(mems[2].id, 1.0, 300)], 60.0)
        assert top(60.0)[0] == "m2"
    assert top(60.0) == ["m2", "m1", "m0"]
    s.close()
