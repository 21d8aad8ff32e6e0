"""An agent's tool-loop step (new tool results, no new user words) in the engine: its
writes go to the store as one transaction, and it stores and forwards what a step
committed in parts would."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memd.engine.conversation.chat import PreparedCall, finish_chat, prepare_chat
from memd.engine.memory import Memd
from memd.types import WindowInfo

WINDOW = WindowInfo(128_000, "config")
ASK: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the flaky deploy test in ci.py please"},
]


def _tool_step(messages: list[dict[str, Any]], i: int) -> list[dict[str, Any]]:
    """The next request of the loop: the model's tool call, then its result."""
    return [*messages,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function",
                 "function": {"name": "read", "arguments": f'{{"path": "f{i}.py"}}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"x = {i}\n" * 400}]


def _call(engine: Memd, messages: list[dict[str, Any]]) -> PreparedCall:
    return prepare_chat(engine, "local", None, copy.deepcopy(messages), model="gpt-4o",
                        window=WINDOW, client="opencode/1.18.0")


def _finish(engine: Memd, call: PreparedCall, i: int) -> None:
    finish_chat(engine, call, status=200, reply={
        "role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read", "arguments": f'{{"path": "f{i}.py"}}'}}]},
        finish_reason="tool_calls", usage=None, model="gpt-4o")


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch, engine: Memd) -> Iterator[list[str]]:
    """What the store committed: one entry per outermost transaction, and one per call
    record written outside any (a write of its own)."""
    done: list[str] = []
    store = engine.store
    transaction, record_call = store.transaction, store.record_call

    @contextmanager
    def counted() -> Iterator[None]:
        outer = not store.in_transaction()
        with transaction():
            yield
        if outer:
            done.append("transaction")

    def recording(*args: Any, **kwargs: Any) -> None:
        if not store.in_transaction():
            done.append("record_call")
        record_call(*args, **kwargs)

    monkeypatch.setattr(store, "transaction", counted)
    monkeypatch.setattr(store, "record_call", recording)
    yield done


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Memd]:
    e = Memd.open(tmp_path / "d")
    yield e
    e.close()


def test_a_tool_loop_step_commits_once(engine: Memd, commits: list[str]) -> None:
    """The step's new messages and its call record are one transaction; a turn with new
    user words commits its messages before its query's memory is retrieved."""
    first = _call(engine, ASK)
    assert commits == ["transaction", "record_call"]  # a new query: retrieved outside
    _finish(engine, first, 0)
    step = _tool_step(ASK, 0)
    commits.clear()
    call = _call(engine, step)
    assert commits == ["transaction"]
    assert call.session is not None and first.session is not None
    assert call.session.id == first.session.id
    assert engine.call("local", call.call_id)["report"]["mode"] == "transparent"
    stored = engine.messages(call.session.id, "local")
    assert [m.role for m in stored][-3:] == ["user", "assistant", "tool"]
    assert stored[-1].content == step[-1]["content"]


def test_a_tool_loop_step_stores_and_forwards_what_a_step_in_parts_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same session replayed with every step taken as a turn with a new query is
    taken (its messages committed, then its call record written) stores the same
    messages, forwards the same requests and records the same reports."""
    from memd.engine.conversation.resend import ResendCache

    def replay(engine: Memd) -> tuple[list[Any], list[Any], list[Any]]:
        messages, forwarded, reports = list(ASK), [], []
        for i in range(4):
            call = _call(engine, messages)
            forwarded.append(call.forward)
            reports.append(engine.call("local", call.call_id)["report"])
            _finish(engine, call, i)
            messages = _tool_step(messages, i)
        assert call.session is not None
        stored = [(m.role, m.content, m.tool_calls, m.tool_call_id, m.token_count,
                   m.chain_hash) for m in engine.messages(call.session.id, "local")]
        return stored, forwarded, reports

    one = Memd.open(tmp_path / "one")
    together = replay(one)
    one.close()

    read = ResendCache.read

    def asking_anew(self: ResendCache, user_id: str, messages: Any) -> Any:
        resent = read(self, user_id, messages)
        resent.previous_query = None  # as if the query were new: the step in parts
        return resent

    monkeypatch.setattr(ResendCache, "read", asking_anew)
    parts = Memd.open(tmp_path / "parts")
    apart = replay(parts)
    parts.close()
    assert together == apart


def test_a_step_that_fails_stores_none_of_its_messages(
    engine: Memd, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool-loop step whose forwarded request cannot be built stores nothing: the
    client's retry of it is then a step like any other, not a resend of stored ones."""
    from memd.engine.conversation import chat

    first = _call(engine, ASK)
    _finish(engine, first, 0)
    assert first.session is not None
    before = len(engine.messages(first.session.id, "local"))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("block failed")

    monkeypatch.setattr(chat, "_augment", broken)
    with pytest.raises(RuntimeError):
        _call(engine, _tool_step(ASK, 0))
    assert len(engine.messages(first.session.id, "local")) == before


def _later(engine: Memd, messages: list[dict[str, Any]]) -> PreparedCall:
    """The call as the proxy prepares it: a tool-loop step's writes wait for its finish."""
    return prepare_chat(engine, "local", None, copy.deepcopy(messages), model="gpt-4o",
                        window=WINDOW, client="opencode/1.18.0", defer=True)


def _roles(engine: Memd, session_id: str) -> list[str]:
    return [m.role for m in engine.messages(session_id, "local")]


def test_a_deferred_step_is_stored_by_its_finish_before_its_reply(engine: Memd) -> None:
    """With ``defer``, a tool-loop step forwards what it would have, stores nothing
    until its call finishes, and then its messages, its record and its reply in order.
    A turn with new user words is stored at once all the same."""
    first = _later(engine, ASK)
    assert first.step is None and first.session is not None
    assert _roles(engine, first.session.id) == ["user"]
    _finish(engine, first, 0)
    step = _tool_step(ASK, 0)
    call = _later(engine, step)
    assert call.step is not None and call.step.pending
    assert _roles(engine, first.session.id) == ["user", "assistant"]  # not yet stored
    assert engine.store.get_call("local", call.call_id) is None
    _finish(engine, call, 1)
    assert not call.step.pending
    assert _roles(engine, first.session.id) == ["user", "assistant", "tool", "assistant"]
    assert engine.messages(first.session.id, "local")[2].content == step[-1]["content"]
    assert engine.call("local", call.call_id)["status"] == 200


def test_deferred_steps_store_and_forward_what_steps_at_once_do(tmp_path: Path) -> None:
    """A session replayed with its steps' writes deferred stores the same messages,
    forwards the same requests and records the same reports as one without."""
    def replay(engine: Memd, prepare: Any) -> tuple[list[Any], list[Any], list[Any]]:
        messages, forwarded, calls = list(ASK), [], []
        for i in range(4):
            call = prepare(engine, messages)
            forwarded.append(call.forward)
            _finish(engine, call, i)
            calls.append(call.call_id)
            messages = _tool_step(messages, i)
        assert call.session is not None
        stored = [(m.role, m.content, m.tool_calls, m.tool_call_id, m.token_count,
                   m.chain_hash) for m in engine.messages(call.session.id, "local")]
        return stored, forwarded, [engine.call("local", c)["report"] for c in calls]

    at_once, deferred = Memd.open(tmp_path / "now"), Memd.open(tmp_path / "later")
    try:
        assert replay(at_once, _call) == replay(deferred, _later)
    finally:
        at_once.close()
        deferred.close()


def test_a_deferred_step_that_another_call_stored_is_not_stored_twice(engine: Memd) -> None:
    """A client's retry of a step while the step's first call is still out stores the
    step; the first call then finds the session moved on: its record is kept, neither
    the messages nor its reply a second time."""
    first = _later(engine, ASK)
    _finish(engine, first, 0)
    assert first.session is not None
    step = _tool_step(ASK, 0)
    slow, retry = _later(engine, step), _later(engine, step)
    assert slow.session is not None and retry.session is not None
    assert slow.session.id == retry.session.id == first.session.id
    _finish(engine, retry, 1)
    _finish(engine, slow, 1)
    assert slow.step is not None and slow.step.turn is None
    assert _roles(engine, first.session.id) == ["user", "assistant", "tool", "assistant"]
    assert engine.call("local", slow.call_id)["status"] == 200


def test_a_deferred_step_whose_writes_fail_keeps_its_record(
    engine: Memd, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Writes that fail after the request went upstream are logged; the call's record
    stays, its reply is not stored without the step, and the client's next step (which
    sends the messages again) stores them."""
    first = _later(engine, ASK)
    _finish(engine, first, 0)
    assert first.session is not None
    call = _later(engine, _tool_step(ASK, 0))
    append = engine.sessions.append

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(engine.sessions, "append", broken)
    _finish(engine, call, 1)
    assert "storing the step's messages failed" in caplog.text
    assert call.step is not None and call.step.failed
    assert engine.call("local", call.call_id)["status"] == 200
    assert _roles(engine, first.session.id) == ["user", "assistant"]
    monkeypatch.setattr(engine.sessions, "append", append)
    nxt = _later(engine, _tool_step(_tool_step(ASK, 0), 1))
    assert nxt.session is not None and nxt.session.id == first.session.id
    _finish(engine, nxt, 2)
    assert _roles(engine, first.session.id) == ["user", "assistant", "tool", "assistant",
                                                "tool", "assistant"]
