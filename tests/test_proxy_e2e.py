"""End to end: memd on a real uvicorn port, a fake upstream that records what it gets,
and the official ``openai`` client, sync and async, streaming and not."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pg import BACKENDS
from servers import FakeUpstream, memd_in_front

from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.memory import Memd

SYSTEM = {"role": "system", "content": "You are a terse assistant."}


@dataclass
class Stack:
    base: str
    upstream: FakeUpstream
    engine: Memd

    def client(self, workspace: str | None = None, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.v1(workspace), api_key="sk-test", max_retries=0,
                             **kw)

    def v1(self, workspace: str | None = None) -> str:
        return f"{self.base}/w/{workspace}/v1" if workspace else f"{self.base}/v1"

    def settle(self) -> None:
        """Wait until the daemon's job worker has drained the queue."""
        deadline = time.monotonic() + 20
        while self.engine.store.pending_jobs():
            assert time.monotonic() < deadline, "jobs did not drain"
            time.sleep(0.05)

    def until(self, check: Any, timeout: float = 10.0) -> None:
        """Wait for a condition: replies are stored after the response is sent."""
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.02)

    def messages(self, session_id: str | None = None) -> list[Any]:
        sid = session_id or self.engine.store.list_sessions("local")[0].id
        return self.engine.messages(sid, "local")

    def injected(self, request: dict[str, Any]) -> str:
        """The memory block memd added to a forwarded request (in the newest user
        message, or a system message of its own), or ""."""
        out = []
        for m in request["messages"]:
            parts = m["content"] if isinstance(m["content"], list) else [
                {"type": "text", "text": m["content"] or ""}]
            for p in parts:
                text = p.get("text") or ""
                if text.startswith(USER_OPEN):
                    out.append(text[len(USER_OPEN):text.index(USER_CLOSE)])
                elif m["role"] == "system" and text.startswith("## Memory"):
                    out.append(text)
        return "\n".join(out)


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """memd (SQLite by default; ``indirect`` "postgres" for the team backend) in front of
    the fake upstream."""
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d",
                       getattr(request, "param", "sqlite")) as (base, engine):
        yield Stack(base, upstream, engine)


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_memory_crosses_sessions_and_history_is_stored_once(stack: Stack) -> None:
    client = stack.client()
    first = [SYSTEM, {"role": "user", "content": "My name is Priya and I deploy with Kubernetes"}]
    raw = client.chat.completions.with_raw_response.create(model="m", messages=first)
    s1 = raw.headers["x-memd-session"]
    answer = raw.parse().choices[0].message.content
    assert answer == "ok: My name is Priya and I deploy with Kubernetes"
    assert stack.upstream.requests[-1]["messages"][0] == SYSTEM  # first and unchanged
    history = first + [{"role": "assistant", "content": answer},
                       {"role": "user", "content": "Thanks. What next?"}]
    raw2 = client.chat.completions.with_raw_response.create(model="m", messages=history)
    assert raw2.headers["x-memd-session"] == s1  # inferred from the resent history
    history += [{"role": "assistant", "content": raw2.parse().choices[0].message.content},
                {"role": "user", "content": "One more thing."}]
    raw3 = client.chat.completions.with_raw_response.create(model="m", messages=history)
    assert raw3.headers["x-memd-session"] == s1
    stack.settle()

    # (the fake embedder's cosine needs the words themselves: MiniLM's would not)
    ask = {"role": "user", "content": "Which tool do I deploy with?"}
    new = client.chat.completions.with_raw_response.create(model="m", messages=[SYSTEM, ask])
    assert new.headers["x-memd-session"] != s1
    assert "Kubernetes" in stack.injected(stack.upstream.requests[-1])

    stack.until(lambda: len(stack.messages(s1)) == 6)
    stored = httpx.get(f"{stack.base}/v1/sessions/{s1}/messages").json()["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "My name is Priya and I deploy with Kubernetes"),
        ("assistant", "ok: My name is Priya and I deploy with Kubernetes"),
        ("user", "Thanks. What next?"),
        ("assistant", "ok: Thanks. What next?"),
        ("user", "One more thing."),
        ("assistant", "ok: One more thing."),
    ]
    call = httpx.get(f"{stack.base}/v1/calls/{new.headers['x-memd-call']}").json()
    assert call["session_id"] == new.headers["x-memd-session"]
    assert any(i["section"] in ("memory", "fact") for i in call["report"]["items"])


def test_a_retried_request_stores_nothing_twice(stack: Stack) -> None:
    client = stack.client()
    msgs = [{"role": "user", "content": "retry me please"}]
    a = client.chat.completions.with_raw_response.create(model="m", messages=msgs)
    b = client.chat.completions.with_raw_response.create(model="m", messages=msgs)
    sid = a.headers["x-memd-session"]
    assert b.headers["x-memd-session"] == sid
    # Each call is closed in the transaction that stores its reply (or decides not to):
    # once both are closed, a wrongly stored second reply would be there.
    calls = [r.headers["x-memd-call"] for r in (a, b)]
    stack.until(lambda: all((stack.engine.store.get_call("local", c) or {}).get("status")
                            is not None for c in calls))
    assert [m.role for m in stack.messages(sid)] == ["user", "assistant"]


def test_edited_history_branches_a_new_session(stack: Stack) -> None:
    client = stack.client()
    h = [{"role": "user", "content": "first question"}]
    s1 = client.chat.completions.with_raw_response.create(model="m", messages=h)
    h2 = h + [{"role": "assistant", "content": "ok: first question"},
              {"role": "user", "content": "second question"}]
    client.chat.completions.create(model="m", messages=h2)
    edited = h + [{"role": "assistant", "content": "ok: first question"},
                  {"role": "user", "content": "a different second question"}]
    branch = client.chat.completions.with_raw_response.create(model="m", messages=edited)
    sid = branch.headers["x-memd-session"]
    assert sid != s1.headers["x-memd-session"]
    session = stack.engine.session(sid, "local")
    assert session.parent_session_id == s1.headers["x-memd-session"]


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_streaming_is_incremental(stack: Stack) -> None:
    stack.upstream.gate = threading.Event()
    stream = stack.client().chat.completions.create(
        model="m", stream=True, messages=[{"role": "user", "content": "stream three words"}]
    )
    pieces = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            stack.upstream.gate.set()  # the upstream is still waiting for this
    assert stack.upstream.released is True
    assert "".join(pieces) == "ok: stream three words"
    stack.until(lambda: len(stack.messages()) == 2)
    stored = stack.messages()
    assert stored[-1].content == "ok: stream three words"
    assert stored[-1].finish_reason == "stop" and not stored[-1].metadata.get("incomplete")


def test_async_client_streaming_and_not(stack: Stack) -> None:
    async def run() -> tuple[str, str]:
        client = openai.AsyncOpenAI(base_url=stack.v1(), api_key="x", max_retries=0)
        plain = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "apples please"}])
        text = ""
        stream = await client.chat.completions.create(
            model="m", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "river stream"}])
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        await client.close()
        return plain.choices[0].message.content or "", text

    plain, streamed = asyncio.run(run())
    # two unrelated chats: neither recalls the other, so each answer echoes its question
    assert plain == "ok: apples please" and streamed == "ok: river stream"
    stack.until(lambda: len(stack.engine.store.list_usage("local")) == 2)
    usage = stack.engine.store.list_usage("local")
    assert len(usage) == 2 and all(u.prompt_tokens == 11 for u in usage)


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_tool_calls_round_trip(stack: Stack) -> None:
    client = stack.client()
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object",
                                              "properties": {"city": {"type": "string"}}}}}]
    msgs: list[Any] = [{"role": "user", "content": "weather in Oslo?"}]
    first = client.chat.completions.create(model="m", messages=msgs, tools=tools,
                                           tool_choice="auto")
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert stack.upstream.requests[-1]["tools"] == tools
    assert stack.upstream.requests[-1]["tool_choice"] == "auto"
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "12 C, cloudy"}]
    final = client.chat.completions.create(model="m", messages=msgs, tools=tools)
    assert final.choices[0].message.content == "ok: 12 C, cloudy"
    sent = stack.upstream.requests[-1]["messages"]
    tool_i = next(i for i, m in enumerate(sent) if m["role"] == "tool")
    assert sent[tool_i - 1]["tool_calls"][0]["id"] == call.id  # never orphaned
    stack.until(lambda: len(stack.messages()) == 4)
    stored = stack.messages()
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls and stored[1].tool_calls[0]["id"] == call.id
    assert stored[2].tool_call_id == call.id


def test_streamed_tool_calls_are_reassembled(stack: Stack) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    stream = stack.client().chat.completions.create(
        model="m", stream=True, tools=tools, messages=[{"role": "user", "content": "weather?"}])
    list(stream)
    stack.until(lambda: len(stack.messages()) == 2)
    reply = stack.messages()[-1]
    assert reply.tool_calls == [{"id": "call_abc", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]
    assert reply.finish_reason == "tool_calls"


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_workspaces_scope_injected_memory(stack: Stack) -> None:
    httpx.post(f"{stack.v1('projA')}/memories",
               json={"text": "In projA we deploy with Nomad"}).raise_for_status()
    httpx.post(f"{stack.v1()}/memories",
               json={"text": "I always deploy from the release branch"}).raise_for_status()
    q = [{"role": "user", "content": "how do we deploy?"}]
    stack.client("projB").chat.completions.create(model="m", messages=q)
    in_b = stack.injected(stack.upstream.requests[-1])
    stack.client("projA").chat.completions.create(model="m", messages=q)
    in_a = stack.injected(stack.upstream.requests[-1])
    assert "Nomad" not in in_b and "release branch" in in_b
    assert "Nomad" in in_a and "release branch" in in_a


def test_upstream_errors_pass_through(stack: Stack) -> None:
    stack.upstream.fail_with = 429
    with pytest.raises(openai.RateLimitError):
        stack.client().chat.completions.create(model="m", messages=[
            {"role": "user", "content": "hi"}])


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"model": "m"}', 400),
        (b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}', 400),
        (b'{"model": "m", "messages": "hello"}', 400),
        (b'{"model": "m", "messages": [], "stream": "yes"}', 400),
        (b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * (20 << 20)
         + b'"}]}', 413),
    ],
)
def test_bad_requests_store_nothing(stack: Stack, body: bytes, status: int) -> None:
    resp = httpx.post(f"{stack.v1()}/chat/completions", content=body,
                      headers={"content-type": "application/json"}, timeout=60)
    assert resp.status_code == status
    error = resp.json()["error"]
    assert error["type"] and error["message"]
    assert stack.engine.store.list_sessions("local") == []
    assert stack.upstream.requests == []


def test_models_come_from_the_upstream(stack: Stack) -> None:
    ids = [m.id for m in stack.client().models.list()]
    assert ids == ["fake-model"]


def test_dns_rebinding_is_refused(stack: Stack) -> None:
    resp = httpx.get(f"{stack.base}/health", headers={"host": "evil.example:8765"})
    assert resp.status_code == 421
    assert httpx.get(f"{stack.base}/health").json()["status"] == "ok"


def test_client_disconnect_mid_stream_keeps_what_arrived(stack: Stack) -> None:
    stack.upstream.gate = threading.Event()
    body = {"model": "m", "stream": True,
            "messages": [{"role": "user", "content": "a long answer please"}]}
    with httpx.stream("POST", f"{stack.v1()}/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        received = b""
        for chunk in resp.iter_raw():
            received += chunk
            if b'"ok:"' in received:
                break  # hang up after the first words
    # memd notices the hang-up while the upstream is still held back, and stores then
    stack.until(lambda: len(stack.messages()) == 2)
    stack.upstream.gate.set()
    reply = stack.messages()[-1]
    assert reply.role == "assistant" and reply.content == "ok:"
    assert reply.metadata.get("incomplete") is True


class CookieUpstream(FakeUpstream):
    """A model server that sets a cookie on every answer (a load balancer's, say)."""

    async def chat(self, request: Any) -> Any:
        response = await super().chat(request)
        response.set_cookie("affinity", f"user-{len(self.requests)}")
        return response


def test_a_cookie_the_model_server_sets_never_goes_out_again(tmp_path: Path) -> None:
    upstream = CookieUpstream()
    with memd_in_front(upstream.app, tmp_path / "d") as (base, _):
        for user in ("alice", "bob"):
            r = httpx.post(f"{base}/v1/chat/completions", headers={"X-Memd-User": user},
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
    assert [h.get("cookie") for h in upstream.headers] == [None, None]
