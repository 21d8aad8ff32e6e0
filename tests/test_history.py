"""The history cache (memd.engine.conversation.history): what a compile gets
from it is what a read of the store gives, whatever happened to the session in between,
on both backends."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import memd
from memd.engine.conversation.history import HistoryCache, recent_history, trim
from memd.engine.memory import Memd
from memd.types import Message


@pytest.fixture
def two_engines(backend: str, tmp_path: Path) -> Any:
    """Two engines over one store, as two processes would be (the fake embedder)."""
    if backend == "sqlite":
        opened = [memd.open(tmp_path / "d", embedder="fake") for _ in range(2)]
    else:
        import pg

        dsn = pg.database()
        opened = [memd.open(tmp_path / f"d{i}", embedder="fake", db=dsn,
                            pg_partitions=(4, 4, 4)) for i in range(2)]
    yield opened
    for engine in opened:
        engine.close()


def _turns(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """``n`` user/assistant turns, some an assistant's tool call with its results."""
    out: list[dict[str, Any]] = []
    while len(out) < n:
        words = " ".join(rng.choice(("otter", "kelp", "census", "harbour", "tide"))
                         for _ in range(rng.randint(1, 60)))
        roll = rng.random()
        if roll < 0.15:
            calls = [{"id": f"c{rng.getrandbits(40)}", "type": "function",
                      "function": {"name": "count", "arguments": "{}"}}
                     for _ in range(rng.randint(1, 2))]
            out.append({"role": "assistant", "content": None, "tool_calls": calls})
            out += [{"role": "tool", "tool_call_id": c["id"], "content": words}
                    for c in calls]
        else:
            out.append({"role": "user" if roll < 0.6 else "assistant", "content": words})
    return out


def _ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def test_cached_history_equals_the_store_through_appends_compressions_and_rollbacks(
    two_engines: list[Memd],
) -> None:
    """Random appends by this engine and by another one over the same store, compressions
    by either, and appends rolled back: after each, for several reaches, the history the
    cache gives equals a read of the store, and the cache answered most of them without
    reading the history in full."""
    here, there = two_engines
    rng = random.Random(7)
    s = here.create_session("u")
    reaches = (60, 400, 5000)
    for step in range(60):
        roll = rng.random()
        if roll < 0.45:
            here.append(s.id, "u", _turns(rng, rng.randint(1, 3)))
        elif roll < 0.6:
            there.append(s.id, "u", _turns(rng, rng.randint(1, 3)))
        elif roll < 0.7:
            active = here.messages(s.id, "u", active_only=True)
            old = [m.id for m in active[:-2] if rng.random() < 0.3]
            if old:
                (there if rng.random() < 0.5 else here).store.mark_compressed(
                    "u", s.id, old, f"summary-{step}")
        elif roll < 0.8:
            with pytest.raises(RuntimeError), here.store.transaction():
                here.append(s.id, "u", _turns(rng, 2))
                raise RuntimeError("rolled back")
        session = here.session(s.id, "u")
        for reach in reaches:
            cached = here.history.read(here.store, "u", session, reach)
            assert _ids(cached) == _ids(recent_history(here.store, "u", session, reach)), \
                (step, reach)
    cache = here.history
    assert cache.hits + cache.extended > cache.misses
    assert cache.hits > 0 and cache.extended > 0


def test_a_compile_after_an_append_reads_only_the_new_turns(two_engines: list[Memd]) -> None:
    """The proxy's case: each call appends, then compiles. The compile reads the new
    turns alone, not the history in full, and the context is the same as without the
    cache."""
    m = two_engines[0]
    s = m.create_session("u")
    m.append(s.id, "u", [{"role": "user", "content": f"turn {i} about otters"}
                         for i in range(40)])
    m.context("u", session_id=s.id, query="otters")
    full: list[Any] = []
    real = m.store.recent_messages

    def spy(*args: Any, **kwargs: Any) -> Any:
        full.append(args)
        return real(*args, **kwargs)

    m.store.recent_messages = spy  # type: ignore[method-assign]
    m.append(s.id, "u", [{"role": "user", "content": "and the sea otters?"}])
    ctx = m.context("u", session_id=s.id, query="otters")
    assert full == [] and m.history.extended == 1
    m.history.max_messages = 0  # off: every compile reads the store
    assert m.context("u", session_id=s.id, query="otters") == ctx
    assert len(full) == 1


def test_a_kept_history_is_read_in_line_and_any_other_beside_the_memories(
        two_engines: list[Memd], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where reads run side by side (PostgreSQL) a compile reads the history and the
    facts in a side thread only when the history is not kept as the session stands:
    a first visit, a longer reach, new turns. A kept one is served in line."""
    import memd.engine.block.context as compiling

    m = two_engines[0]
    s = m.create_session("u")
    m.append(s.id, "u", [{"role": "user", "content": f"turn {i} about otters"}
                         for i in range(10)])
    session = m.store.get_session("u", s.id)
    assert session is not None and not m.history.holds("u", session, 10_000)
    sides: list[Any] = []
    real = compiling.aside

    def counted(*args: Any, **kwargs: Any) -> Any:
        if args[1] is compiling._history_and_facts:  # not recall's message search
            sides.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(compiling, "aside", counted)
    first = m.context("u", session_id=s.id, query="otters")
    aside = 1 if m.store.concurrent_reads else 0
    assert len(sides) == aside
    reach = max(r for r in (k.reach for k in m.history._kept.values()))
    assert m.history.holds("u", session, reach)
    assert not m.history.holds("u", session, reach + 1)
    assert m.context("u", session_id=s.id, query="otters") == first
    assert len(sides) == aside  # kept: in line
    m.append(s.id, "u", [{"role": "user", "content": "and the sea otters?"}])
    assert not m.history.holds("u", m.store.get_session("u", s.id), reach)  # type: ignore[arg-type]
    after = m.context("u", session_id=s.id, query="otters")
    assert len(sides) == 2 * aside  # new turns: beside the memories again
    m.history.max_messages = 0  # the same contexts as read from the store each time
    assert m.context("u", session_id=s.id, query="otters") == after


def test_a_transaction_inside_a_read_batch_is_neither_cached_nor_served(
    two_engines: list[Memd],
) -> None:
    """A transaction opened inside a read batch reads its own uncommitted writes: the
    store says it is in a transaction, so nothing read there is kept, and after its
    rollback the cache serves what the store holds."""
    m = two_engines[0]
    s = m.create_session("u")
    m.append(s.id, "u", [{"role": "user", "content": "first otters"}])
    assert not m.store.in_transaction()
    with pytest.raises(RuntimeError), m.store.read_batch():
        assert not m.store.in_transaction()
        with m.store.transaction():
            assert m.store.in_transaction()
            m.append(s.id, "u", [{"role": "user", "content": "rolled back otters"}])
            seen = m.history.read(m.store, "u", m.session(s.id, "u"), 5000)
            assert [x.content for x in seen][-1] == "rolled back otters"
            raise RuntimeError("roll back")
    m.append(s.id, "u", [{"role": "user", "content": "committed otters"}])
    session = m.session(s.id, "u")
    assert [x.content for x in m.history.read(m.store, "u", session, 5000)] == \
        [x.content for x in recent_history(m.store, "u", session, 5000)] == \
        ["first otters", "committed otters"]


def test_a_caller_editing_a_compiled_context_does_not_change_the_next_one(
    two_engines: list[Memd],
) -> None:
    """The second compile's history comes from the cache: the first one's messages must
    not share the cached messages' tool calls with it."""
    m = two_engines[0]
    s = m.create_session("u")
    m.append(s.id, "u", [
        {"role": "user", "content": "count the otters"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "count", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42 otters"},
        {"role": "user", "content": "and the kelp?"},
    ])
    ctx = m.context("u", session_id=s.id, query="otters")
    call = next(x for x in ctx.messages if x.get("tool_calls"))
    call["tool_calls"][0]["function"]["arguments"] = '{"edited": true}'
    again = m.context("u", session_id=s.id, query="otters")
    assert m.history.hits >= 1
    call = next(x for x in again.messages if x.get("tool_calls"))
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"


def test_cache_is_bounded_by_messages_least_recently_used_first() -> None:
    """Past max_messages the least recently used session's history goes first."""
    cache = HistoryCache(max_messages=5)

    class Store:
        def __init__(self) -> None:
            self.reads: list[str] = []

        def in_transaction(self) -> bool:
            return False

        def recent_messages(self, user_id: str, session_id: str, budget: int,
                            **_: Any) -> list[Message]:
            self.reads.append(session_id)
            return [Message(id=f"{session_id}-{i}", session_id=session_id, user_id=user_id,
                            turn_index=i, role="user", content="x", token_count=1,
                            created_at=0.0) for i in (2, 1)]

    from memd.types import Session

    store = Store()
    sessions = [Session(id=f"s{i}", user_id="u", workspace=None, created_at=0.0,
                        updated_at=0.0, turn_count=2) for i in range(3)]
    for s in sessions[:2]:
        cache.read(store, "u", s, 100)  # type: ignore[arg-type]
    cache.read(store, "u", sessions[0], 100)  # type: ignore[arg-type]  # s0 used last
    cache.read(store, "u", sessions[2], 100)  # type: ignore[arg-type]  # 6 > 5: s1 goes
    cache.read(store, "u", sessions[0], 100)  # type: ignore[arg-type]
    cache.read(store, "u", sessions[1], 100)  # type: ignore[arg-type]
    assert store.reads == ["s0", "s1", "s2", "s1"]


def test_trim_completes_a_tool_block_cut_at_the_reach() -> None:
    """The oldest message kept may be a tool result: its call (and the results between)
    come with it; when the call is older than the list, trim cannot tell (None)."""
    def msg(turn: int, role: str, tokens: int) -> Message:
        return Message(id=str(turn), session_id="s", user_id="u", turn_index=turn,
                       role=role, content="x", token_count=tokens, created_at=0.0)

    history = [msg(1, "user", 5), msg(2, "assistant", 5), msg(3, "tool", 5),
               msg(4, "tool", 5), msg(5, "user", 5)]
    assert _ids(trim(history, 4) or []) == ["5"]  # 5's 5 tokens cross 4
    assert _ids(trim(history, 5) or []) == ["2", "3", "4", "5"]  # 4 crosses; its call
    assert _ids(trim(history, 100) or []) == ["1", "2", "3", "4", "5"]
    assert trim(history[2:], 5) is None
