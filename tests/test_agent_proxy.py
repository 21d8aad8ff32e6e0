"""Agent sessions replayed through ``memd serve`` (a real uvicorn) to a recording upstream:
every client message arrives unchanged and in order, the memory block is the one
addition, a 2 MB tool result is taken and stored, each message is stored once, and
regenerated or retried requests never carry a stored reply."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pg import BACKENDS
from servers import memd_in_front, serve

import memd
from memd.config import load_settings
from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.learning.extract import STYLE_TAG
from memd.engine.memory import Memd
from memd.engine.virtual import faults
from memd.server.app import create_app
from memd.types import Tier
from tests.agent_traffic import KINDS, AgentSession, ScriptedUpstream, generate


@dataclass
class Stack:
    base: str
    upstream: ScriptedUpstream
    engine: Memd

    def post(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return httpx.post(f"{self.base}/v1/chat/completions", json=body, headers=headers,
                          timeout=60)


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """memd (SQLite, or PostgreSQL with ``indirect`` "postgres") in front of a scripted
    upstream; the user has a fact, so a memory block goes in wherever there is room."""
    upstream = ScriptedUpstream()
    with memd_in_front(upstream.app, tmp_path / "d",
                       getattr(request, "param", "sqlite")) as (base, engine):
        # a style rule: it applies to every request, whatever it is about
        engine.add("Code style: small functions, type hints", "local", tier=Tier.PROCEDURAL,
                   provenance="instruction", tags=[STYLE_TAG])
        yield Stack(base, upstream, engine)


def without_memory(sent: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The request as it was before memd added its blocks (placement "user", each in a
    user message before its text), and the blocks."""
    out = copy.deepcopy(sent)
    blocks = []
    for m in out["messages"]:
        if m["role"] != "user":
            continue
        content = m["content"]
        if isinstance(content, str) and content.startswith(USER_OPEN):
            cut = content.index(USER_CLOSE) + len(USER_CLOSE)
            m["content"] = content[cut:]
            blocks.append(content[:cut])
        elif isinstance(content, list) and content and str(
                content[0].get("text", "")).startswith(USER_OPEN):
            blocks.append(content.pop(0)["text"])
    return out, "\n".join(blocks) or None


def replay(stack: Stack, session: AgentSession) -> list[str]:
    """Send every step as the client would; the call ids."""
    stack.upstream.script([s.reply for s in session.steps])
    calls = []
    for step in session.steps:
        resp = stack.post(step.request)
        assert resp.status_code == 200, resp.text
        calls.append(resp.headers["x-memd-call"])
    return calls


def stored_once(stack: Stack, session: AgentSession, calls: list[str]) -> None:
    """The session memd recorded holds each non-system message the client sent, and
    each reply, exactly once and in order."""
    sessions = {stack.engine.store.get_call("local", c)["session_id"] for c in calls}
    assert len(sessions) == 1
    stored = stack.engine.messages(sessions.pop(), "local")
    last = session.steps[-1]
    expected = [m for m in last.request["messages"] if m["role"] not in ("system",
                                                                         "developer")]
    expected.append(last.reply)
    assert len(stored) == len(expected)
    for got, want in zip(stored, expected, strict=True):
        assert got.role == want["role"]
        assert got.tool_call_id == want.get("tool_call_id")
        if isinstance(want.get("content"), str) and want["content"]:
            assert got.content == want["content"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_client_message_arrives_unchanged_with_one_memory_block(
        stack: Stack, kind: str) -> None:
    session = generate(kind, seed=1, target_tokens=20_000)
    calls = replay(stack, session)
    assert len(stack.upstream.requests) == len(session.steps)
    for step, sent, call_id in zip(session.steps, stack.upstream.requests, calls,
                                   strict=True):
        plain, block = without_memory(sent)
        assert plain == step.request  # every field, every message, in order
        assert sent["messages"][0] == step.request["messages"][0]  # the system prompt
        assert sent.get("tools") == step.request.get("tools")
        # gpt-4o's 128k window leaves room at 20k tokens: the block is always there
        assert block is not None and "small functions, type hints" in block
        report = httpx.get(f"{stack.base}/v1/calls/{call_id}").json()["report"]
        assert report["injected"] == block and report["window"]["source"] == "builtin"
    stored_once(stack, session, calls)


@pytest.mark.parametrize("stack", ["postgres"], indirect=True)
def test_replay_on_postgresql_streaming(stack: Stack) -> None:
    session = generate("opencode-like", seed=2, target_tokens=15_000, stream=True)
    calls = replay(stack, session)
    for step, sent in zip(session.steps, stack.upstream.requests, strict=True):
        assert without_memory(sent)[0] == step.request
    deadline = 100
    while stack.engine.store.pending_jobs() and deadline:
        deadline -= 1
        asyncio.run(asyncio.sleep(0.05))
    stored_once(stack, session, calls)


def test_a_2mb_tool_result_is_taken_and_stored(stack: Stack) -> None:
    session = generate("opencode-like", seed=3, target_tokens=12_000,
                       big_tool_result_bytes=2_000_000)
    calls = replay(stack, session)
    virtualized = 0
    for step, sent in zip(session.steps, stack.upstream.requests, strict=True):
        got, want = without_memory(sent)[0], step.request
        if got == want:
            continue
        # over the model's window: memd held the big result out (memd.engine.virtual),
        # and forwarded everything else as sent
        virtualized += 1
        # with memd's memory tools after the client's (memd.engine.virtual.faults)
        assert got["tools"] == [*want["tools"], *faults.TOOLS]
        assert {**got, "messages": None, "tools": None} == {**want, "messages": None,
                                                             "tools": None}
        differ = [(a, b) for a, b in zip(got["messages"], want["messages"], strict=True)
                  if a != b]
        assert [(a["role"], a["tool_call_id"]) for a, b in differ] == [
            (b["role"], b["tool_call_id"]) for a, b in differ] == [("tool", differ[0][1][
                "tool_call_id"])]
        assert differ[0][0]["content"].startswith("[memd: ")
    assert virtualized
    sid = stack.engine.store.get_call("local", calls[-1])["session_id"]
    biggest = max(len(m.content or "") for m in stack.engine.messages(sid, "local"))
    assert biggest >= 1_900_000
    stored_once(stack, session, calls)


def test_a_message_over_max_message_chars_is_a_clear_413_and_stores_nothing(
        tmp_path: Path) -> None:
    upstream = ScriptedUpstream()
    with serve(upstream.app) as up:
        settings = replace(load_settings(data_dir=tmp_path / "d"), upstream_url=f"{up}/v1",
                           max_message_chars=100_000)
        engine = memd.open(settings=settings)
        with serve(create_app(engine, settings)) as base:
            resp = httpx.post(f"{base}/v1/chat/completions", json={
                "model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 100_001}]})
            assert resp.status_code == 413
            assert "max_message_chars" in resp.json()["error"]["message"]
        assert engine.store.list_sessions("local") == [] and upstream.requests == []
        engine.close()


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_official_clients_sync_async_stream_and_not(stack: Stack) -> None:
    session = generate("continue-like", seed=4, target_tokens=8_000)
    stack.upstream.script([s.reply for s in session.steps] * 2)
    sync = openai.OpenAI(base_url=f"{stack.base}/v1", api_key="sk-x", max_retries=0)
    first = session.steps[0].request
    fields = {k: v for k, v in first.items() if k not in ("model", "messages", "stream",
                                                           "stream_options")}
    reply = sync.chat.completions.create(model=first["model"], messages=first["messages"],
                                         **fields)
    assert reply.choices[0].message.tool_calls or reply.choices[0].message.content
    assert without_memory(stack.upstream.requests[-1])[0] == {
        k: v for k, v in first.items() if k != "stream"}  # the SDK leaves a False out

    async def streamed() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{stack.base}/v1", api_key="sk-x",
                                    max_retries=0)
        stream = await client.chat.completions.create(
            model=first["model"], messages=session.steps[1].request["messages"],
            stream=True, **fields)
        return [c async for c in stream]

    chunks = asyncio.run(streamed())
    assert chunks and without_memory(stack.upstream.requests[-1])[0]["messages"] == (
        session.steps[1].request["messages"])


def test_regenerate_retry_and_same_first_message_forward_only_the_client_messages(
        stack: Stack) -> None:
    stack.upstream.script([
        {"role": "assistant", "content": "Green."},
        {"role": "assistant", "content": "Because it is calm."},
        {"role": "assistant", "content": "Because it is calm."},
        {"role": "assistant", "content": "Blue."},
        {"role": "assistant", "content": "Red."},
    ])
    ask = [{"role": "user", "content": "Pick a colour for the logo."}]
    first = stack.post({"model": "gpt-4o", "messages": ask})
    follow = [*ask, {"role": "assistant", "content": "Green."},
              {"role": "user", "content": "Why that colour?"}]
    stack.post({"model": "gpt-4o", "messages": follow})
    stack.post({"model": "gpt-4o", "messages": follow})  # a retry: the same request again
    stack.post({"model": "gpt-4o", "messages": ask})  # regenerate the first answer
    stack.post({"model": "gpt-4o", "messages": ask})  # a new chat, same first message
    sent = [without_memory(r)[0]["messages"] for r in stack.upstream.requests]
    assert sent == [ask, follow, follow, ask, ask]  # never a stored reply appended
    sid = first.headers["x-memd-session"]
    stored = [(m.role, m.content) for m in stack.engine.messages(sid, "local")]
    assert stored == [("user", "Pick a colour for the logo."), ("assistant", "Green."),
                      ("user", "Why that colour?"), ("assistant", "Because it is calm.")]


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_a_2mb_result_of_distinct_words_is_stored_and_searchable(stack: Stack) -> None:
    """A log of 2 MB of distinct words (hashes, ids): the keyword index takes a bounded
    part of it (PostgreSQL's tsvector holds at most 1 MB), the message is stored whole."""
    words = " ".join(f"id{i:07d}x" for i in range(200_000))  # 2.2 MB, all distinct
    tool_call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    messages = [{"role": "user", "content": "list the ids"},
                {"role": "assistant", "content": None, "tool_calls": [tool_call]},
                {"role": "tool", "tool_call_id": "c1", "content": words}]
    stack.upstream.script([{"role": "assistant", "content": "Listed."}])
    resp = stack.post({"model": "gpt-4o", "messages": messages})
    assert resp.status_code == 200, resp.text
    sid = resp.headers["x-memd-session"]
    stored = stack.engine.messages(sid, "local")
    assert [len(m.content or "") for m in stored][2] == len(words)
    hits = stack.engine.search("id0000001x", "local", kinds=["message"])
    assert any(h.id == stored[2].id for h in hits)
