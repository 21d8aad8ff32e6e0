"""A tool-loop step's append made while its request is upstream
(memd.engine.conversation.overlap): it stores, forwards and records what the step
stored before sending does; the reply is stored after the messages it answers even when
the append is slow; an append that fails loses no answer, and the next request stores
what it missed."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from pg import BACKENDS, open_engine
from servers import FakeUpstream, memd_in_front

from memd.engine.conversation import overlap
from memd.engine.conversation.chat import finish_chat, prepare_chat
from memd.engine.conversation.sessions import Sessions
from memd.engine.memory import Memd
from memd.types import Session
from tests.test_tool_loop_step import ASK, WINDOW, _tool_step

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def _replay(engine: Memd, defer: bool) -> tuple[list[Any], list[Any], list[Any], int]:
    """Four calls of one tool loop: what is stored, forwarded and recorded, and how many
    calls left their append to run beside the send."""
    messages, forwarded, reports, deferred = list(ASK), [], [], 0
    with ThreadPoolExecutor(1) as pool:
        for i in range(4):
            call = prepare_chat(engine, "local", None, copy.deepcopy(messages),
                                model="gpt-4o", window=WINDOW, client="opencode/1.18.0",
                                defer=defer)
            if call.deferred is not None:
                deferred += 1
                call.deferred.start(pool.submit)
            forwarded.append(call.forward)
            finish_chat(engine, call, status=200, reply={
                "role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "read", "arguments": f'{{"path": "f{i}.py"}}'}}]},
                finish_reason="tool_calls", usage={"prompt_tokens": 9,
                                                   "completion_tokens": 3}, model="gpt-4o")
            reports.append((engine.call("local", call.call_id)["report"],
                            engine.call("local", call.call_id)["status"]))
            messages = _tool_step(messages, i)
    assert call.session is not None
    session = engine.session(call.session.id, "local")
    stored = [(m.turn_index, m.role, m.content, m.tool_calls, m.tool_call_id, m.token_count,
               m.chain_hash, m.sanitized, m.metadata.get("call_id") is not None)
              for m in engine.messages(call.session.id, "local")]
    stored.append((session.turn_count, session.total_prompt_tokens,
                   session.total_completion_tokens, session.title, session.metadata))
    return stored, forwarded, reports, deferred


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deferred_append_stores_forwards_and_records_the_same(
        tmp_path: Path, backend: str) -> None:
    """The same tool loop with the steps' appends run beside their sends and with them
    run before: the same rows, the same forwarded requests, the same call records."""
    with_overlap = open_engine(backend, tmp_path / "a")
    try:
        overlapped = _replay(with_overlap, defer=True)
    finally:
        with_overlap.close()
    without = open_engine(backend, tmp_path / "b")
    try:
        before = _replay(without, defer=False)
    finally:
        without.close()
    assert overlapped[3] == 3 and before[3] == 0  # the three tool steps, and none
    assert overlapped[:3] == before[:3]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[str, Memd, FakeUpstream]]:
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d") as (base, engine):
        yield base, engine, upstream


def _post(base: str, messages: list[dict[str, Any]], stream: bool) -> httpx.Response:
    resp = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "gpt-4o", "messages": messages, "tools": TOOLS, "stream": stream})
    assert resp.status_code == 200, resp.text
    return resp


def _content(resp: httpx.Response) -> str:
    """The answer's text, whole or streamed."""
    if not resp.headers["content-type"].startswith("text/event-stream"):
        return str(resp.json()["choices"][0]["message"]["content"])
    return "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in resp.text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"])


def _started(monkeypatch: pytest.MonkeyPatch, delay: float = 0.0,
             fail: bool = False) -> list[str]:
    """Record each deferred append the proxy starts; make it ``delay`` seconds late, or
    have its append raise."""
    seen: list[str] = []
    start = overlap.Deferred.start

    def watched(self: overlap.Deferred,
                submit: Any) -> None:
        write = self._write

        def late() -> Session | None:
            time.sleep(delay)
            return write()

        seen.append("started")
        self._write = late
        start(self, submit)

    monkeypatch.setattr(overlap.Deferred, "start", watched)
    if fail:
        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the store failed")

        monkeypatch.setattr(Sessions, "append", broken)
    return seen


def _first_turn(base: str) -> list[dict[str, Any]]:
    """The user's request, answered with a tool call: the loop's history so far."""
    reply = _post(base, ASK, False).json()["choices"][0]["message"]
    return [*ASK, reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"],
                          "content": "Oslo: 4 degrees, rain\n" * 200}]


@pytest.mark.parametrize("stream", [False, True])
def test_the_reply_is_stored_after_a_slow_deferred_append(
        proxy: tuple[str, Memd, FakeUpstream], monkeypatch: pytest.MonkeyPatch,
        stream: bool) -> None:
    """An append that ends well after the model answered still comes first: the reply
    row follows the tool result it answers, and the call is recorded and closed."""
    base, engine, _ = proxy
    step = _first_turn(base)
    seen = _started(monkeypatch, delay=0.5)
    resp = _post(base, step, stream)
    assert seen == ["started"]
    stored = engine.messages(resp.headers["x-memd-session"], "local")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert [m.turn_index for m in stored] == sorted(m.turn_index for m in stored)
    assert stored[-1].content == "ok: " + step[-1]["content"]
    call = engine.call("local", resp.headers["x-memd-call"])
    assert call["status"] == 200 and call["report"]["mode"] == "transparent"


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_deferred_append_still_answers_and_the_next_request_repairs(
        proxy: tuple[str, Memd, FakeUpstream], monkeypatch: pytest.MonkeyPatch,
        stream: bool) -> None:
    """The store fails the step's append: the client still gets the model's answer, no
    reply is stored after the gap, and the next request stores the step's messages,
    the reply and its own, in order."""
    base, engine, upstream = proxy
    step = _first_turn(base)
    with monkeypatch.context() as patch:
        seen = _started(patch, fail=True)
        resp = _post(base, step, stream)
    assert seen == ["started"]
    sid = resp.headers["x-memd-session"]
    answer = "ok: " + step[-1]["content"]
    assert _content(resp) == answer  # the model's answer arrived
    assert [m.role for m in engine.messages(sid, "local")] == ["user", "assistant"]
    assert engine.call("local", resp.headers["x-memd-call"])["status"] == 200
    later = [*step, {"role": "assistant", "content": answer},
             {"role": "user", "content": "Now check the wind in Bergen"}]
    again = _post(base, later, False)
    assert again.headers["x-memd-session"] == sid
    stored = engine.messages(sid, "local")
    assert [(m.role, m.content) for m in stored[2:]] == [
        ("tool", step[-1]["content"]), ("assistant", answer),
        ("user", "Now check the wind in Bergen"),
        ("assistant", None)]  # the model's tool call, answering the new request
    assert len(upstream.requests) == 3


def test_a_deferred_append_nobody_started_runs_when_joined(engine: Memd) -> None:
    """A caller that asks for the overlap and never starts it loses nothing: storing
    the reply runs the append first."""
    first = prepare_chat(engine, "local", None, copy.deepcopy(ASK), model="gpt-4o",
                         window=WINDOW, defer=True)
    assert first.deferred is None  # a new query: stored before anything is retrieved
    finish_chat(engine, first, status=200, reply={"role": "assistant", "content": "ok"},
                finish_reason="stop", usage=None, model="gpt-4o")
    step = [*ASK, {"role": "assistant", "content": "ok"},
            {"role": "tool", "tool_call_id": "t", "content": "result"}]
    call = prepare_chat(engine, "local", None, step, model="gpt-4o", window=WINDOW,
                        defer=True)
    assert call.deferred is not None and call.session is not None
    assert len(engine.messages(call.session.id, "local")) == 2
    finish_chat(engine, call, status=200, reply={"role": "assistant", "content": "done"},
                finish_reason="stop", usage=None, model="gpt-4o")
    assert [m.content for m in engine.messages(call.session.id, "local")] == [
        ASK[1]["content"], "ok", "result", "done"]
