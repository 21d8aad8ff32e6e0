"""A long message history's full-text index held in memory (memd.backends.sqlite.words):
it ranks as FTS5 does, loads at a user's second search, follows appends, and is dropped
by every other change to the user's messages."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from store_data import DIM, session

import memd.backends.sqlite.messages as sm
import memd.backends.sqlite.words as sw
from memd.backends.sqlite import SQLiteStore
from memd.backends.sqlite.fulltext import fts_terms
from memd.types import NewMessage

_SYLLABLES = ["ka", "lo", "mi", "ru", "te", "na", "so", "vi", "de", "pa", "zu", "ho"]


def _words(rng: random.Random, n: int) -> list[str]:
    """A Zipf-like vocabulary: a few words in most messages, most words rare."""
    vocab = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
             for _ in range(400)]
    return [vocab[min(int(rng.paretovariate(0.9)) - 1, len(vocab) - 1)] for _ in range(n)]


def _history(s: SQLiteStore, user: str, n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    sess = s.create_session(session(user=user))
    texts = [" ".join(_words(rng, rng.randint(2, 30))) for _ in range(n)]
    texts += ["Cafés and running shoes", "the café runs", "Naïve RUNNERS ran"]
    msgs = s.append_messages(user, sess.id, [NewMessage("user", t) for t in texts],
                             [1] * len(texts), [None] * len(texts), 1.0)
    return [m.id for m in msgs]


def _ranks(s: SQLiteStore, user: str, query: str, k: int) -> list[tuple[str, float]]:
    messages = s.erasure._messages  # type: ignore[attr-defined]
    return messages._keyword_ranks(user, fts_terms(user, query), k, None)  # type: ignore[no-any-return]


def _held(s: SQLiteStore, user: str) -> sw.HeldWords | None:
    for _ in range(500):  # the load runs in a thread
        found = s.words.held.get(user)
        if found is not None or (user in s.words.held and user not in s.words._loads):
            return found
        time.sleep(0.01)
    raise AssertionError("the held index never loaded")


def test_the_held_index_ranks_as_fts5_does(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every query's best k, ids and bm25, equal to FTS5's, under each path of the bounded
    ranking (every match, the rare words', the newest), stemmed and folded words too."""
    monkeypatch.setattr(sw, "HELD_FROM", 10)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    _history(s, "alice", 1500)
    _history(s, "bob", 200, seed=2)  # another user's rows count in bm25's averages
    held = s.words.load("alice")
    assert held is not None and len(held) == 1503
    rng = random.Random(9)
    queries = [" ".join(_words(rng, rng.randint(1, 8))) for _ in range(80)]
    queries += ["cafe run", "running cafés naive", "RUN runs ran"]
    compared = 0
    for rank_all, rare, newest in ((2000, 300, 300), (60, 25, 40), (10**6, 300, 300)):
        monkeypatch.setattr(sm, "RANK_ALL", rank_all)
        monkeypatch.setattr(sm, "RARE_MATCHES", rare)
        monkeypatch.setattr(sm, "NEWEST_MATCHES", newest)
        for q in queries:
            s.words.held.pop("alice", None)
            s.words._seen.discard("alice")  # FTS5's answer, no load started
            want = _ranks(s, "alice", q, 12)
            s.words.held["alice"] = held
            got = _ranks(s, "alice", q, 12)
            got_r = [(m, round(r, 9)) for m, r in got]
            want_r = [(m, round(r, 9)) for m, r in want]
            assert [r for _, r in got_r] == [r for _, r in want_r], q
            # the same messages, but where several tie at the k-th place
            last = want_r[-1][1] if want_r else None
            assert {m for m, r in got_r if r != last} == {m for m, r in want_r
                                                          if r != last}, q
            compared += bool(want)
    assert compared > 200
    assert _ranks(s, "alice", "cafe", 5)  # folded: Cafés, café
    s.close()


def test_the_held_index_loads_at_the_second_search_and_follows_appends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw, "HELD_FROM", 100)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    _history(s, "alice", 150)
    _history(s, "carol", 20, seed=3)
    for user in ("alice", "carol"):
        assert s.keyword_messages(user, "cafe", 5)  # the first: FTS5, nothing loaded
        assert user not in s.words.held
        s.keyword_messages(user, "cafe", 5)
    held = _held(s, "alice")
    assert held is not None and len(held) == 153
    assert _held(s, "carol") is None  # too few messages: FTS5 ranks them all cheaply
    sess = s.create_session(session())
    [new] = s.append_messages("alice", sess.id, [NewMessage("user", "a zanzibar quokka")],
                              [1], [None], 2.0)
    assert s.words.held["alice"] is held and len(held) == 154
    assert [m.id for m, _ in s.keyword_messages("alice", "quokkas", 5)] == [new.id]
    # carol's messages are counted on as she appends; at HELD_FROM her index loads
    carol = s.create_session(session(user="carol")).id
    s.append_messages("carol", carol, [NewMessage("user", "more")], [1], [None], 2.0)
    assert s.words.held["carol"] is None and s.words._few["carol"] == 24
    monkeypatch.setattr(sw, "HELD_FROM", 25)
    s.append_messages("carol", carol, [NewMessage("user", "cafe")], [1], [None], 2.0)
    assert "carol" not in s.words.held
    s.keyword_messages("carol", "cafe", 5)
    carols = _held(s, "carol")
    assert carols is not None and len(carols) == 25
    s.close()


def test_other_changes_to_the_messages_drop_the_held_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Erasure, a rolled-back append and another process's write each drop it; the index
    loaded again ranks what the file holds."""
    monkeypatch.setattr(sw, "HELD_FROM", 10)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    ids = _history(s, "alice", 40)
    first = s.get_message("alice", ids[0])
    assert first is not None
    sess_id = first.session_id
    s.words.held["alice"] = s.words.load("alice")
    s.words._data_version = s.connection.data_version()
    with pytest.raises(RuntimeError), s.transaction():
        s.append_messages("alice", s.create_session(session()).id,
                          [NewMessage("user", "never kept")], [1], [None], 2.0)
        raise RuntimeError("rolled back")
    assert "alice" not in s.words.held
    s.words.held["alice"] = held = s.words.load("alice")
    assert held is not None and len(held) == 43
    other = SQLiteStore(tmp_path / "w.db", dim=DIM)  # another process, in effect
    other.append_messages("alice", other.create_session(session()).id,
                          [NewMessage("user", "written elsewhere")], [1], [None], 2.0)
    other.close()
    assert s.words.of("alice") is None and "alice" not in s.words.held
    for erase in (lambda: s.erase_message("alice", sess_id, ids[0]),
                  lambda: s.prune_messages("alice", [ids[1]]),
                  lambda: s.delete_inactive_messages("alice", 10.0)):
        s.words.held["alice"] = s.words.load("alice")
        erase()
        assert "alice" not in s.words.held
    assert s.words.load("alice") is None  # every message deleted: none left to hold
    s.close()


def test_a_load_keeps_what_was_appended_while_it_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw, "HELD_FROM", 10)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    _history(s, "alice", 40)
    real = s.words.load
    added: list[str] = []

    def load_then_append(user: str) -> Any:
        out = real(user)  # read on the side connection; an append lands after it
        [m] = s.append_messages(user, s.create_session(session()).id,
                                [NewMessage("user", "appended meanwhile")], [1], [None], 2.0)
        added.append(m.id)
        return out

    monkeypatch.setattr(s.words, "load", load_then_append)
    s.words._load("alice")
    held = s.words.held["alice"]
    assert held is not None and len(held) == 44 and held.ids[-1] == added[0]
    assert [m.id for m, _ in s.keyword_messages("alice", "meanwhile", 3)] == added
    s.close()


def test_the_tables_totals_are_fts5s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The averages record read as the table's rows and tokens: every user's rows."""
    monkeypatch.setattr(sw, "HELD_FROM", 0)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    _history(s, "alice", 30)
    _history(s, "bob", 12, seed=4)
    alice, bob = s.words.load("alice"), s.words.load("bob")
    assert alice is not None and bob is not None
    assert s.words.table() == (len(alice) + len(bob),
                               int(alice.lengths[: len(alice)].sum()
                                   + bob.lengths[: len(bob)].sum()))
    s.close()


def test_warming_a_user_loads_their_index_at_once(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """What `memd serve` loads for its user at start (Store.warm_vectors) includes a long
    history's index, loaded in the caller's thread; a short one stays on FTS5."""
    monkeypatch.setattr(sw, "HELD_FROM", 30)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    _history(s, "alice", 40)
    _history(s, "carol", 5, seed=3)
    assert s.warm_vectors("alice") == 43
    held = s.words.held["alice"]
    assert held is not None and len(held) == 43
    assert s.warm_vectors("carol") == 0 and s.words.held["carol"] is None
    assert s.words.of("alice") is held  # the first search finds it held
    s.close()


def test_the_held_indexes_stay_within_their_bytes(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond HELD_BYTES the least recently searched user's index is dropped, and read
    again from their second search on; the newest load is always kept."""
    monkeypatch.setattr(sw, "HELD_FROM", 30)
    s = SQLiteStore(tmp_path / "w.db", dim=DIM)
    for seed, user in enumerate(("alice", "bob", "carol")):
        _history(s, user, 60, seed=seed)
    s.warm_vectors("alice")
    alice = s.words.held["alice"]
    assert alice is not None
    monkeypatch.setattr(sw, "HELD_BYTES", int(alice.nbytes * 2.5))  # room for two
    s.warm_vectors("bob")
    assert s.words.of("alice") is alice  # searched since: bob's is now the older
    s.warm_vectors("carol")
    assert list(s.words.held) == ["alice", "carol"]
    assert s.keyword_messages("bob", "cafe", 5)  # FTS5 answers meanwhile
    assert "bob" not in s.words.held and "bob" not in s.words._loads
    s.keyword_messages("bob", "cafe", 5)
    bob = _held(s, "bob")
    assert bob is not None and len(bob) == 63
    assert list(s.words.held) == ["carol", "bob"]  # alice's was the least recent
    monkeypatch.setattr(sw, "HELD_BYTES", 1)
    s.warm_vectors("alice")
    assert list(s.words.held) == ["alice"]  # the newest is kept even alone beyond it
    s.close()
