"""The Anthropic Messages door end to end: memd on a real uvicorn port in front of a
scripted Anthropic-format upstream (and the OpenAI-format one, for memory across doors),
driven by the official ``anthropic`` client, streaming and not."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic_upstream import SIGNATURE, FakeAnthropic, prompt_bytes
from servers import FakeUpstream, memd_in_front, poll, serve, wait_for_messages

from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.conversation.chains import content_text
from memd.engine.memory import Memd
from memd.models.tokens import calibrated_scale, counter_for
from memd.server.windows import CALIBRATION_TEXT

HOST = "staging.rocket.internal"
SYSTEM = [{"type": "text", "text": "You are a coding agent.",
           "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
          "cache_control": {"type": "ephemeral"}}]
REMINDER = {"type": "text", "text": "<system-reminder>\nToday is Friday.\n</system-reminder>"}


@dataclass
class Stack:
    base: str
    upstream: FakeAnthropic
    chat_upstream: FakeUpstream
    engine: Memd

    def client(self, **kw: Any) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.base, api_key="sk-ant-test", max_retries=0,
                                   **kw)



@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    upstream, chat = FakeAnthropic(), FakeUpstream()
    with serve(upstream.app) as up, memd_in_front(
            chat.app, tmp_path / "d", upstream_anthropic_url=up) as (base, engine):
        yield Stack(base, upstream, chat, engine)


def block_of(request: dict[str, Any]) -> str:
    """The memory block memd put in a forwarded Messages request, or ""."""
    for m in request["messages"]:
        for part in m["content"] if isinstance(m["content"], list) else (
                {"type": "text", "text": m["content"]},):
            text = part.get("text") or ""
            if part.get("type") == "text" and text.startswith(USER_OPEN):
                return text[len(USER_OPEN):text.index(USER_CLOSE)]
    return ""


def without_block(request: dict[str, Any]) -> dict[str, Any]:
    """A forwarded request with memd's block taken out: what the client sent."""
    out = copy.deepcopy(request)
    for m in out["messages"]:
        if isinstance(m["content"], list):
            m["content"] = [p for p in m["content"] if not (
                p.get("type") == "text" and (p.get("text") or "").startswith(USER_OPEN))]
        elif m["content"].startswith(USER_OPEN):
            m["content"] = m["content"][m["content"].index(USER_CLOSE) + len(USER_CLOSE):]
    return out


def tool_task(client: anthropic.Anthropic, prompt: str, *, stream: bool) -> list[Any]:
    """A two-step tool task as an agent runs it; returns the messages it sent last."""
    messages: list[Any] = [{"role": "user", "content": [REMINDER,
                                                        {"type": "text", "text": prompt}]}]
    kw: dict[str, Any] = {"model": "claude-sonnet-5", "max_tokens": 1024, "system": SYSTEM,
                          "tools": TOOLS, "thinking": {"type": "enabled",
                                                       "budget_tokens": 512}}
    for _ in range(2):
        if stream:
            with client.messages.stream(messages=messages, **kw) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(messages=messages, **kw)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason != "tool_use":
            break
        use = reply.content[-1]
        assert use.type == "tool_use"
        messages.append({"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": use.id, "content": "make; pytest"}]})
    return messages


@pytest.mark.parametrize("stream", [False, True])
def test_tool_task_is_forwarded_unchanged_and_stored_once(stack: Stack, stream: bool) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    sent = tool_task(stack.client(), f"Deploy to the staging host {HOST} after tests",
                     stream=stream)
    first, second = stack.upstream.requests
    # the client's request reaches the model as sent, plus the block
    assert without_block(second)["messages"] == sent[:-1]
    assert second["system"] == SYSTEM and second["tools"] == TOOLS
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 512}
    assert second["messages"][1]["content"][0] == {"type": "thinking",
                                                   "thinking": "Let me look.",
                                                   "signature": SIGNATURE}
    # the block is in the user's typed turn, after nothing of the client's, the same
    # bytes on both steps (the prompt cache holds), never in the tool result
    assert HOST in block_of(first)
    assert first["messages"][0]["content"][0] == second["messages"][0]["content"][0]
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert len(second["messages"][2]["content"]) == 1
    # one session, each message once: the prompt, the tool call, its result, the answer
    wait_for_messages(stack.engine, 4)
    (session,) = stack.engine.store.list_sessions("local")
    roles = [m.role for m in stack.engine.messages(session.id, "local")]
    assert roles == ["user", "assistant", "tool", "assistant"]
    stored = stack.engine.messages(session.id, "local")
    assert stored[1].tool_calls and stored[1].tool_calls[0]["function"]["name"] == "read_file"
    assert content_text(stored[3].content) == "ok: make; pytest"


def test_cache_read_share_stays_high_across_the_loop(stack: Stack) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    tool_task(stack.client(), f"Read the readme about {HOST}", stream=True)
    first, second = stack.upstream.requests
    assert block_of(first)  # memd added to the prompt, and the cache still holds
    shared = stack.upstream._cached()
    assert shared / len(prompt_bytes(first)) >= 0.95
    # memd logs what the upstream said its cache read, per call
    calls = stack.engine.calls("local")[::-1]
    assert [c["metadata"]["usage"]["cache_read_input_tokens"] for c in calls] == [0, shared]


def test_stream_events_arrive_in_order_and_unchanged(stack: Stack) -> None:
    client = stack.client()
    with client.messages.stream(model="claude-sonnet-5", max_tokens=100, tools=TOOLS,
                                thinking={"type": "enabled", "budget_tokens": 200},
                                messages=[{"role": "user", "content": "Read it"}]) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert "input_json" in kinds and "signature" in kinds
    assert final.content[0].type == "thinking" and final.content[0].signature == SIGNATURE
    assert final.content[1].type == "tool_use" and final.content[1].input == {
        "path": "README.md"}


def test_headers_query_and_credentials_go_upstream(stack: Stack) -> None:
    raw = httpx.post(f"{stack.base}/v1/messages?beta=true", json={
        "model": "claude-sonnet-5", "max_tokens": 50,
        "messages": [{"role": "user", "content": "hello there"}]},
        headers={"x-api-key": "sk-ant-mine", "anthropic-version": "2023-06-01",
                 "anthropic-beta": "interleaved-thinking-2025-05-14,context-1m",
                 "user-agent": "claude-cli/2.1.0 (external, cli)"})
    assert raw.status_code == 200, raw.text
    assert raw.json()["content"] == [{"type": "text", "text": "ok: hello there"}]
    assert raw.headers["x-memd-session"] and raw.headers["x-memd-call"]
    assert stack.upstream.paths[-1] == "/v1/messages?beta=true"
    sent = stack.upstream.headers[-1]
    assert sent["x-api-key"] == "sk-ant-mine"
    assert sent["anthropic-version"] == "2023-06-01"
    assert sent["anthropic-beta"] == "interleaved-thinking-2025-05-14,context-1m"
    assert sent["user-agent"] == "claude-cli/2.1.0 (external, cli)"
    count = httpx.post(f"{stack.base}/v1/messages/count_tokens?beta=true", json={
        "model": "claude-sonnet-5", "messages": [{"role": "user", "content": "hi"}]})
    assert count.status_code == 200 and count.json()["input_tokens"] > 0
    assert stack.upstream.paths[-1] == "/v1/messages/count_tokens"


def test_count_tokens_without_the_route_upstream_is_memds_own(tmp_path: Path) -> None:
    chat = FakeUpstream()  # an OpenAI-compatible server: no count_tokens route
    with memd_in_front(chat.app, tmp_path / "d") as (base, _):
        short, long = (httpx.post(f"{base}/v1/messages/count_tokens", json={
            "model": "claude-sonnet-5",
            "messages": [{"role": "user", "content": text}]}) for text in ("hi", "hi " * 400))
    assert short.status_code == long.status_code == 200
    assert 0 < short.json()["input_tokens"] < long.json()["input_tokens"] - 300


def test_title_request_is_a_side_request(stack: Stack) -> None:
    client = stack.client()
    reply = client.messages.create(
        model="claude-haiku-5", max_tokens=512, system=[{
            "type": "text", "text": "Generate a concise title for this session."}],
        messages=[{"role": "user", "content": f"<session>Deploy to {HOST}</session>"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": {
            "type": "object", "properties": {"title": {"type": "string"}}}}}})
    assert reply.content[0].type == "text"
    assert stack.engine.store.list_sessions("local") == []
    assert block_of(stack.upstream.requests[-1]) == ""


def test_a_fact_told_to_claude_reaches_a_chat_completions_client(stack: Stack) -> None:
    stack.client().messages.create(
        model="claude-sonnet-5", max_tokens=100,
        messages=[{"role": "user", "content": [REMINDER, {
            "type": "text", "text": f"Remember: the staging host is {HOST}."}]}])
    wait_for_messages(stack.engine, 2)
    # the memory is written by a queued job (the full write path), off the chat path
    poll(lambda: any(HOST in m.text for m in stack.engine.store.iter_memories("local")),
         "the memory of the Claude turn")
    openai.OpenAI(base_url=f"{stack.base}/v1", api_key="x", max_retries=0).chat.completions\
        .create(model="gpt-4o", messages=[{"role": "user",
                                            "content": "What is the staging host again?"}])
    forwarded = stack.chat_upstream.requests[-1]["messages"][-1]["content"]
    assert HOST in forwarded and forwarded.startswith(USER_OPEN)


def test_bad_bodies_are_400(stack: Stack) -> None:
    url = f"{stack.base}/v1/messages"
    for body in ({"model": "m"}, {"messages": "x"}, {"messages": [], "stream": "yes"},
                 {"messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
                 {"messages": [{"role": "user", "content": [{"text": "no type"}]}]},
                 {"messages": [{"role": "user"}]}, {"messages": [None]},
                 {"messages": [{"role": "user", "content": "x"}], "system": None}):
        r = httpx.post(url, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["message"]
    assert stack.upstream.requests == []
    assert stack.engine.store.list_sessions("local") == []


def test_the_base_url_answers_a_pre_connect(stack: Stack) -> None:
    # Claude Code opens its connection with HEAD / before the first call
    assert httpx.head(stack.base + "/").status_code == 200
    root = httpx.get(stack.base + "/")
    assert root.status_code == 200 and root.json()["name"] == "memd"


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_as_too_long_goes_again_without_memory(stack: Stack, stream: bool) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    stack.upstream.refuse_memory = True
    sent = [{"role": "user", "content": [REMINDER, {
        "type": "text", "text": "Which staging host do we deploy to?"}]}]
    raw = stack.client().messages.with_raw_response.create(
        model="claude-sonnet-5", max_tokens=100, messages=sent, stream=stream)
    assert raw.http_response.status_code == 200
    if stream:
        text = "".join(e.delta.text for e in raw.parse() if e.type == "content_block_delta"
                       and e.delta.type == "text_delta")
    else:
        text = raw.parse().content[0].text
    assert text.startswith("ok: ")
    first, second = stack.upstream.requests
    assert HOST in block_of(first) and second["messages"] == sent
    call = httpx.get(f"{stack.base}/v1/calls/{raw.headers['x-memd-call']}").json()
    assert call["metadata"]["retried"] is True and call["status"] == 200
    assert call["report"]["injected"] is None


def test_count_tokens_calibrates_memds_counts(stack: Stack) -> None:
    """The model server's count of a sample text, asked once per model, scales memd's
    own token counts for that model."""
    client = stack.client()
    for _ in range(2):
        client.messages.create(model="claude-opus-4-1", max_tokens=100, messages=[
            {"role": "user", "content": "hello"}])
    counts = [p for p in stack.upstream.paths if p.endswith("/count_tokens")]
    assert len(counts) == 2  # the sample, and the framing alone: once for the model
    call = stack.engine.store.list_calls("local")[0]
    report = stack.engine.call("local", call["id"])["report"]
    assert report["window"] == {"tokens": 200000, "source": "builtin", "detail": "claude-*"}
    # the fake counts a token per four bytes of the request
    def counted(text: str) -> int:
        return len(json.dumps({"model": "claude-opus-4-1", "messages": [
            {"role": "user", "content": text}]})) // 4

    ratio = (counted(CALIBRATION_TEXT) - counted(".") + 1) / counter_for("gpt-4").count(
        CALIBRATION_TEXT)
    assert report["token_scale"] == pytest.approx(
        calibrated_scale("claude-opus-4-1", ratio), rel=0.02)
    assert report["token_scale"] != 1.0


def test_a_pinned_session_header_names_the_session(stack: Stack) -> None:
    """X-Memd-Session works on this door as on Chat Completions: the turn goes to the
    named session, and a second conversation under the same name continues it."""
    client = stack.client(default_headers={"X-Memd-Session": "pinned-1"})
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet-5", max_tokens=100,
        messages=[{"role": "user", "content": "Summarize this for the team."}])
    assert raw.headers["x-memd-session"] == "pinned-1"  # not a side request either
    client.messages.create(model="claude-sonnet-5", max_tokens=100,
                           messages=[{"role": "user", "content": "Another question"}])
    wait_for_messages(stack.engine, 4)
    assert [s.id for s in stack.engine.store.list_sessions("local")] == ["pinned-1"]
    stored = [m.content for m in stack.engine.store.get_messages("local", "pinned-1")]
    assert "Summarize this for the team." in stored and "Another question" in stored
