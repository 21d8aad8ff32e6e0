"""The agent traffic fixtures themselves (``tests/agent_traffic.py``): generated sessions are
valid OpenAI chat requests that grow the way clients grow them, and the scripted upstream
speaks the protocol the official ``openai`` client expects. Nothing here goes through memd's
proxy."""

from __future__ import annotations

import base64
import inspect
import json
import struct
import zlib
from collections.abc import Iterator
from functools import cache
from typing import Any

import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from starlette.testclient import TestClient

from tests import agent_traffic
from tests.agent_traffic import (
    CONTEXT_LENGTH_EXCEEDED,
    KINDS,
    AgentSession,
    ScriptedUpstream,
    all_sessions,
    generate,
    png_data_url,
    request_tokens,
)

NATIVE = ("opencode-like", "continue-like", "sdk-script")
MESSAGE = pydantic.TypeAdapter(ChatCompletionMessageParam)
TOOL = pydantic.TypeAdapter(ChatCompletionToolParam)


@cache
def session(kind: str, target: int = 30_000, seed: int = 0, stream: bool = False
            ) -> AgentSession:
    return generate(kind, seed=seed, target_tokens=target, stream=stream)


def validate(adapter: pydantic.TypeAdapter[Any], value: Any) -> Any:
    """Validate all the way down: pydantic checks ``Iterable`` fields of the openai
    TypedDicts lazily, as they are iterated."""
    def drain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: drain(x) for k, x in v.items()}
        if isinstance(v, list | tuple | Iterator):
            return [drain(x) for x in v]
        return v

    return drain(adapter.validate_python(value))


def texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content or [] if p.get("type") == "text"]


# --- sessions ----------------------------------------------------------------------------

def test_validator_rejects_a_broken_message() -> None:
    with pytest.raises(pydantic.ValidationError):
        validate(MESSAGE, {"role": "tool", "content": "no tool_call_id"})
    with pytest.raises(pydantic.ValidationError):
        validate(MESSAGE, {"role": "user", "content": [{"type": "image_url"}]})


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_every_request_is_a_valid_chat_request(kind: str, stream: bool) -> None:
    s = session(kind, 10_000, stream=stream)
    assert s.name == kind and len(s.steps) >= 2
    for step in s.steps:
        body = step.request
        assert json.loads(json.dumps(body)) == body
        assert body["model"] == "gpt-4o" and body["stream"] is stream
        assert body.get("stream_options") == ({"include_usage": True} if stream else None)
        for m in body["messages"]:
            validate(MESSAGE, m)
        validate(MESSAGE, step.reply)
        assert step.reply["role"] == "assistant"
        if kind in NATIVE:
            assert 10 <= len(body["tools"]) <= 15 and body["tool_choice"] == "auto"
            for tool in body["tools"]:
                validate(TOOL, tool)
                assert tool["function"]["parameters"]["type"] == "object"
        else:
            assert "tools" not in body


@pytest.mark.parametrize("kind", KINDS)
def test_tool_messages_answer_the_calls_just_before_them(kind: str) -> None:
    messages = session(kind).steps[-1].request["messages"]
    i, widest = 0, 0
    calls_seen: set[str] = set()
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"tool message {i} answers no call"
        calls = m.get("tool_calls") or []
        ids = [c["id"] for c in calls]
        answers = messages[i + 1:i + 1 + len(calls)]
        assert [a["role"] for a in answers] == ["tool"] * len(calls)
        assert [a["tool_call_id"] for a in answers] == ids
        for c in calls:
            assert c["function"]["name"] in {t["function"]["name"] for t in
                                             session(kind).steps[0].request["tools"]}
            json.loads(c["function"]["arguments"])
        assert not calls_seen & set(ids), "tool call ids repeat"
        calls_seen |= set(ids)
        widest = max(widest, len(calls))
        i += 1 + len(calls)
    if kind in ("opencode-like", "sdk-script"):
        assert widest >= 2, "no parallel tool calls"
    elif kind == "continue-like":
        assert widest == 1
    else:
        assert not calls_seen


@pytest.mark.parametrize("kind", KINDS)
def test_each_request_resends_the_last_one_and_its_reply(kind: str) -> None:
    steps = session(kind).steps
    assert len(steps) >= 5
    for prev, nxt in zip(steps, steps[1:], strict=False):
        before = prev.request["messages"] + [prev.reply]
        assert nxt.request["messages"][:len(before)] == before
        assert len(nxt.request["messages"]) > len(before)
        assert {k: v for k, v in nxt.request.items() if k != "messages"} == {
            k: v for k, v in prev.request.items() if k != "messages"}
    systems = [json.dumps([m for m in s.request["messages"] if m["role"] == "system"])
               for s in steps]
    assert len(set(systems)) == 1 and systems[0] != "[]"


def test_system_prompts_are_long_where_the_clients_are() -> None:
    def system_tokens(kind: str) -> int:
        first = session(kind).steps[0].request["messages"]
        return request_tokens({"model": "gpt-4o",
                               "messages": [m for m in first if m["role"] == "system"]})

    assert 8_000 <= system_tokens("cline-like") <= 12_000
    assert all(1_500 <= system_tokens(k) <= 4_000 for k in ("aider-like", "opencode-like"))


@pytest.mark.parametrize("target", [10_000, 30_000, 50_000, 100_000])
def test_sessions_reach_the_target_size(target: int) -> None:
    for kind in KINDS:
        steps = session(kind, target).steps
        sizes = [request_tokens(s.request) for s in steps]
        assert sizes == sorted(sizes) and len(steps) >= 2, kind
        assert 0.75 * target <= sizes[-1] <= 1.25 * target, (kind, sizes[-1])


def test_generation_is_deterministic_per_seed() -> None:
    for kind in KINDS:
        again = generate(kind, seed=0, target_tokens=30_000)
        assert again == session(kind)
        other = generate(kind, seed=1, target_tokens=30_000)
        assert other.steps[-1].request != again.steps[-1].request
    assert [s.name for s in all_sessions(target_tokens=10_000)] == list(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_sessions_have_several_user_turns(kind: str) -> None:
    messages = session(kind).steps[-1].request["messages"]
    followups = [i for i, m in enumerate(messages) if m["role"] == "user"
                 and any(f in t for t in texts(m) for f in agent_traffic._FOLLOWUPS)]
    assert followups, "no follow-up user turn"
    for i in followups:
        assert messages[i - 1]["role"] == "assistant" and not messages[i - 1].get("tool_calls")
        assert messages[i + 1]["role"] == "assistant"  # the agent works on


def test_sessions_carry_fields_a_proxy_must_pass_through() -> None:
    bodies = {k: session(k).steps[-1].request for k in KINDS}
    assert bodies["cline-like"]["temperature"] == 0
    assert bodies["sdk-script"]["metadata"]["job"] == "triage"
    assert bodies["sdk-script"]["user"] == "nightly-triage"
    assert bodies["opencode-like"]["parallel_tool_calls"] is True
    cline = bodies["cline-like"]["messages"]
    assert cline[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert any(p.get("cache_control") for p in cline[1]["content"])
    sdk = bodies["sdk-script"]["messages"]
    assert any("annotations" in m and m["role"] == "assistant" for m in sdk)
    assert any(m.get("name") == "ci-bot" for m in sdk)
    aider = bodies["aider-like"]["messages"]
    assert any("<<<<<<< SEARCH" in m["content"] for m in aider if m["role"] == "assistant")
    assert any("repository" in m["content"] and "⋮" in m["content"] for m in aider)
    assert any("*added these files to the chat*" in m["content"] for m in aider)


def test_tool_results_look_like_real_ones() -> None:
    blob = json.dumps([session(k).steps[-1].request["messages"] for k in KINDS])
    for marker in ("def ", "export async function", "@@ -", "+++ b/", "short test summary info",
                   "E   assert", "AssertionError", "FAILED", "passed in"):
        assert marker in blob, marker
    files = [m["content"] for m in session("continue-like").steps[-1].request["messages"]
             if m["role"] == "tool" and m["content"].startswith('"""')]
    assert max(len(f.splitlines()) for f in files) >= 150  # whole source files


def test_image_part_is_a_valid_png() -> None:
    first_user = session("continue-like").steps[0].request["messages"][1]
    parts = [p for p in first_user["content"] if p["type"] == "image_url"]
    assert len(parts) == 1 and parts[0]["image_url"]["url"] == png_data_url()
    head, data = parts[0]["image_url"]["url"].split(",", 1)
    assert head == "data:image/png;base64"
    png = base64.b64decode(data, validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body)
        chunks[kind] = body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2) and list(chunks)[-1] == b"IEND"
    assert len(zlib.decompress(chunks[b"IDAT"])) == height * (1 + 3 * width)


@pytest.mark.parametrize("kind", KINDS)
def test_one_tool_result_can_be_huge(kind: str) -> None:
    s = generate(kind, target_tokens=10_000, big_tool_result_bytes=2_000_000)
    sizes = [len(json.dumps(step.request)) for step in s.steps]
    assert sizes[0] < 200_000 and all(n > 2_000_000 for n in sizes[1:])
    huge = [t for m in s.steps[-1].request["messages"] for t in texts(m) if len(t) > 1_000_000]
    assert len(huge) == 1
    if kind in ("cline-like", "opencode-like", "continue-like"):
        assert len(huge[0].encode()) == 2_000_000
    small = {**s.steps[-1].request, "messages": [
        m for m in s.steps[-1].request["messages"] if not any(t in huge for t in texts(m))]}
    assert request_tokens(small) <= 12_500  # the rest still follows the budget


# --- the scripted upstream ---------------------------------------------------------------

def client_for(upstream: ScriptedUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="sk-test", max_retries=0,
                         http_client=TestClient(upstream.app))


def send(client: openai.OpenAI, body: dict[str, Any]) -> Any:
    """Send a fixture body as a client would: known parameters as arguments, the rest as
    extra body fields."""
    known = inspect.signature(client.chat.completions.create).parameters
    return client.chat.completions.create(
        **{k: v for k, v in body.items() if k in known},
        extra_body={k: v for k, v in body.items() if k not in known} or None)


def test_upstream_answers_in_order_and_records_requests() -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}}
    upstream = ScriptedUpstream([{"role": "assistant", "content": "first"},
                                 {"role": "assistant", "content": None,
                                  "tool_calls": [call, {**call, "id": "call_2"}]}])
    client = client_for(upstream)
    one = send(client, {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                        "temperature": 0, "x_client": {"v": 1}})
    two = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert one.choices[0].message.content == "first"
    assert one.choices[0].finish_reason == "stop"
    assert [c.id for c in two.choices[0].message.tool_calls or []] == ["call_1", "call_2"]
    assert two.choices[0].finish_reason == "tool_calls"
    assert upstream.requests[0] == {"model": "m", "temperature": 0, "x_client": {"v": 1},
                                    "messages": [{"role": "user", "content": "hi"}]}
    assert upstream.headers[0]["authorization"] == "Bearer sk-test"
    assert [m.id for m in client.models.list()] == ["gpt-4o"]
    with pytest.raises(openai.InternalServerError, match="no scripted reply"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert len(upstream.requests) == 3


def test_upstream_fails_once_when_told() -> None:
    upstream = ScriptedUpstream([{"role": "assistant", "content": "after the error"}])
    upstream.fail_next_with(400, CONTEXT_LENGTH_EXCEEDED)
    client = client_for(upstream)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(openai.BadRequestError) as err:
        send(client, body)
    assert err.value.code == "context_length_exceeded"
    assert send(client, body).choices[0].message.content == "after the error"
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_sessions_replay_through_the_openai_client_streaming(kind: str) -> None:
    s = session(kind, 10_000, stream=True)
    upstream = ScriptedUpstream.for_session(s)
    client = client_for(upstream)
    for step in s.steps:
        content, usage = "", None
        calls: dict[int, dict[str, Any]] = {}
        for chunk in send(client, step.request):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for d in choice.delta.tool_calls or []:
                    c = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
                    c["name"] += (d.function and d.function.name) or ""
                    c["arguments"] += (d.function and d.function.arguments) or ""
        assert content == (step.reply.get("content") or "")
        assert [calls[i] for i in sorted(calls)] == [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in step.reply.get("tool_calls") or []]
        assert usage is not None and usage.total_tokens > 0
    assert upstream.requests == [step.request for step in s.steps]
