"""The Ollama door end to end: memd on a real uvicorn port in front of a scripted Ollama
server that records every request (and the OpenAI-format one, for memory across doors),
driven over HTTP as Ollama's clients drive it, streaming (NDJSON) and not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from ollama_upstream import MODELS, TIMINGS, FakeOllama
from servers import FakeUpstream, free_port, memd_in_front, poll, serve, wait_for_messages

from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.conversation.chains import content_text
from memd.engine.memory import Memd

HOST = "staging.rocket.internal"
MODEL = "llama3.2:latest"
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


@dataclass
class Stack:
    base: str
    upstream: FakeOllama
    chat_upstream: FakeUpstream
    engine: Memd

    def chat(self, body: dict[str, Any], **kw: Any) -> httpx.Response:
        return httpx.post(f"{self.base}/api/chat", json={"model": MODEL, **body},
                          timeout=30, **kw)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    upstream, chat = FakeOllama(), FakeUpstream()
    with serve(upstream.app) as up, memd_in_front(
            chat.app, tmp_path / "d", upstream_ollama_url=up) as (base, engine):
        yield Stack(base, upstream, chat, engine)


def lines(resp: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


def block_of(request: dict[str, Any]) -> str:
    """The memory block memd put in a forwarded chat request, or ""."""
    for m in request["messages"]:
        text = m.get("content") or ""
        if text.startswith(USER_OPEN):
            return text[len(USER_OPEN):text.index(USER_CLOSE)]
    return ""


def test_chat_streams_ndjson_with_the_block_in_the_newest_user_message(stack: Stack) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    sent = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "ok: hello"},
            {"role": "user", "content": "Which staging host do we deploy to?"}]
    resp = stack.chat({"messages": sent, "options": {"temperature": 0}, "keep_alive": "5m"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/x-ndjson")
    assert resp.headers["x-memd-session"] and resp.headers["x-memd-call"]
    got = lines(resp)
    assert "".join(g["message"]["content"] for g in got) == \
        "ok: Which staging host do we deploy to?"
    assert [g["done"] for g in got] == [False, False, True]
    assert {k: got[-1][k] for k in TIMINGS} == TIMINGS  # the timings pass through
    (forwarded,) = stack.upstream.requests
    assert HOST in block_of(forwarded)
    # only the newest user message changed: the block before its text
    assert forwarded["messages"][:3] == sent[:3]
    assert forwarded["messages"][3]["content"].endswith(sent[3]["content"])
    assert forwarded["messages"][3]["content"].startswith(USER_OPEN)
    assert forwarded["options"] == {"temperature": 0} and forwarded["keep_alive"] == "5m"
    assert "stream" not in forwarded  # sent as the client sent it: Ollama's default
    # the reply is stored, with its usage
    wait_for_messages(stack.engine, 4)
    call = httpx.get(f"{stack.base}/v1/calls/{resp.headers['x-memd-call']}").json()
    assert call["status"] == 200 and call["metadata"]["usage"]["eval_count"] == 282


def test_chat_without_streaming_is_one_json(stack: Stack) -> None:
    resp = stack.chat({"messages": [{"role": "user", "content": "hi"}], "stream": False})
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["message"] == {"role": "assistant", "content": "ok: hi"}
    assert data["done"] is True and data["prompt_eval_count"] == 26
    wait_for_messages(stack.engine, 2)
    (session,) = stack.engine.store.list_sessions("local")
    stored = stack.engine.messages(session.id, "local")
    assert [m.role for m in stored] == ["user", "assistant"]
    assert content_text(stored[1].content) == "ok: hi"


def test_generate_reaches_the_upstream_byte_identical(stack: Stack) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    raw = (b'{ "model" : "' + MODEL.encode() + b'",\n "prompt": "def deploy(host):  # '
           + HOST.encode() + b'", "suffix": "\\n", "options": {"num_ctx": 4096}}')
    resp = httpx.post(f"{stack.base}/api/generate", content=raw,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 200, resp.text
    assert lines(resp)[-1]["response"] == "ok"
    assert stack.upstream.raw == [raw]
    assert resp.headers["x-memd-side"] == "true"
    assert stack.engine.store.list_sessions("local") == []
    whole = httpx.post(f"{stack.base}/api/generate",
                       json={"model": MODEL, "prompt": "x", "stream": False})
    assert whole.json()["response"] == "ok" and whole.json()["eval_count"] == 282


def test_the_other_routes_are_relayed(stack: Stack) -> None:
    tags = httpx.get(f"{stack.base}/api/tags")
    assert tags.status_code == 200 and tags.json() == {"models": MODELS}
    assert httpx.get(f"{stack.base}/api/version").json() == {"version": "0.13.0"}
    assert httpx.get(f"{stack.base}/api/ps").json()["models"][0]["context_length"] == 8192
    show = httpx.post(f"{stack.base}/api/show", json={"model": MODEL})
    assert show.json()["parameters"] == "num_ctx 8192"
    missing = httpx.post(f"{stack.base}/api/show", json={"model": "nope"})
    assert missing.status_code == 404 and missing.json() == {"error": "model 'nope' not found"}
    embed = httpx.post(f"{stack.base}/api/embed", json={"model": MODEL, "input": "hi"})
    assert embed.json()["embeddings"] == [[0.1, 0.2]]
    assert stack.upstream.paths == ["/api/tags", "/api/version", "/api/ps", "/api/show",
                                    "/api/show", "/api/embed"]
    assert stack.upstream.requests[-1] == {"model": MODEL, "input": "hi"}
    # workspace-scoped base URLs serve the door too
    assert httpx.get(f"{stack.base}/w/proj/api/tags").json() == {"models": MODELS}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_with_object_arguments_stay_one_session(stack: Stack, stream: bool) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Read the readme about {HOST}"}]
    first = stack.chat({"messages": messages, "tools": TOOLS, "stream": stream})
    assert first.status_code == 200, first.text
    calls = [c for g in (lines(first) if stream else [first.json()])
             for c in g["message"].get("tool_calls") or ()]
    assert calls == [{"function": {"name": "read_file",
                                   "arguments": {"path": "README.md", "lines": [1, 20]}}}]
    # the client resends the call with its arguments' keys in another order
    messages += [{"role": "assistant", "content": "", "tool_calls": [{"function": {
        "name": "read_file", "arguments": {"lines": [1, 20], "path": "README.md"}}}]},
        {"role": "tool", "content": "make; pytest", "tool_name": "read_file"}]
    second = stack.chat({"messages": messages, "tools": TOOLS, "stream": stream})
    assert second.status_code == 200, second.text
    assert first.headers["x-memd-session"] == second.headers["x-memd-session"]
    one, two = stack.upstream.requests
    assert one["messages"][0]["content"] == two["messages"][0]["content"]  # same block
    assert two["messages"][1:] == messages[1:]  # the tool loop goes as sent
    wait_for_messages(stack.engine, 4)
    (session,) = stack.engine.store.list_sessions("local")
    stored = stack.engine.messages(session.id, "local")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls is not None
    assert json.loads(stored[1].tool_calls[0]["function"]["arguments"]) == {
        "path": "README.md", "lines": [1, 20]}
    assert content_text(stored[3].content) == "ok: make; pytest"


def test_a_memory_crosses_between_the_ollama_and_chat_doors(stack: Stack) -> None:
    told = stack.chat({"messages": [{"role": "user", "content":
                                     f"Remember: the staging host is {HOST}."}]})
    assert told.status_code == 200
    wait_for_messages(stack.engine, 2)
    poll(lambda: not stack.engine.store.pending_jobs(), "what was said is extracted")
    openai.OpenAI(base_url=f"{stack.base}/v1", api_key="x", max_retries=0).chat.completions\
        .create(model="gpt-4o", messages=[{"role": "user",
                                            "content": "What is the staging host again?"}])
    forwarded = stack.chat_upstream.requests[-1]["messages"][-1]["content"]
    assert HOST in forwarded and forwarded.startswith(USER_OPEN)
    # and the other way: told on the chat door, recalled on the Ollama door
    openai.OpenAI(base_url=f"{stack.base}/v1", api_key="x", max_retries=0).chat.completions\
        .create(model="gpt-4o", messages=[{
            "role": "user", "content": "Remember: the production host is prod.rocket.internal."}])
    wait_for_messages(stack.engine, 6)
    poll(lambda: not stack.engine.store.pending_jobs(), "what was said is extracted")
    stack.chat({"messages": [{"role": "user", "content": "What is the production host again?"}],
                "stream": False})
    assert "prod.rocket.internal" in block_of(stack.upstream.requests[-1])


@pytest.mark.parametrize("num_ctx", [16384, 16384.0])  # JSON does not tell 3.0 from 3
def test_num_ctx_is_the_window(stack: Stack, num_ctx: float) -> None:
    resp = stack.chat({"messages": [{"role": "user", "content": "hi"}], "stream": False,
                       "options": {"num_ctx": num_ctx}})
    call = httpx.get(f"{stack.base}/v1/calls/{resp.headers['x-memd-call']}").json()
    window = call["report"]["window"]
    assert (window["tokens"], window["source"]) == (16384, "request")


def test_a_title_asked_as_json_and_an_empty_chat_are_side_requests(stack: Stack) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    title = stack.chat({"messages": [{"role": "user", "content": f"Title: deploy to {HOST}"}],
                        "format": {"type": "object"}, "stream": False})
    load = stack.chat({"messages": []})
    assert title.status_code == load.status_code == 200, (title.text, load.text)
    assert title.headers["x-memd-side"] == load.headers["x-memd-side"] == "true"
    assert block_of(stack.upstream.requests[0]) == ""
    assert stack.upstream.requests[1] == {"model": MODEL, "messages": []}
    assert stack.engine.store.list_sessions("local") == []


def test_bad_bodies_are_400_as_ollama_says_errors(stack: Stack) -> None:
    url = f"{stack.base}/api/chat"
    for body in ({"messages": []}, {"model": 3}, {"model": MODEL, "messages": "x"},
                 {"model": MODEL, "messages": [None]},
                 {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]},
                 {"model": MODEL, "messages": [{"role": "system", "content": "x"}]},
                 {"model": MODEL, "messages": [{"role": "user", "content": ["x"]}]},
                 {"model": MODEL, "messages": [{"role": "user", "content": "x",
                                                "images": [1]}]},
                 {"model": MODEL, "messages": [{"role": "assistant", "tool_calls": [
                     {"function": {"name": "f", "arguments": "{}"}}]}]},
                 {"model": MODEL, "stream": "yes"}, {"model": MODEL, "options": []},
                 {"model": MODEL, "options": {"num_ctx": 0}},
                 {"model": MODEL, "options": {"num_ctx": 1.5}}):
        r = httpx.post(url, json=body)
        assert r.status_code == 400, (body, r.text)
        assert isinstance(r.json()["error"], str) and r.json()["error"]
    for path in ("/api/generate", "/api/show", "/api/embed"):
        r = httpx.post(f"{stack.base}{path}", content=b"[1]",
                       headers={"content-type": "application/json"})
        assert r.status_code == 400 and isinstance(r.json()["error"], str), path
    assert stack.upstream.requests == []
    assert stack.engine.store.list_sessions("local") == []


def test_the_published_schema_refuses_a_chat_of_system_messages_alone(stack: Stack) -> None:
    """The OpenAPI document says what the door refuses: a chat whose messages are all
    system messages is invalid there as it is a 400 here; none at all (loading the model)
    and one with a user message are valid."""
    import jsonschema

    doc = httpx.get(f"{stack.base}/openapi.json", timeout=60).json()  # made when first asked
    schema = doc["paths"]["/api/chat"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    system = {"role": "system", "content": "be brief"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": MODEL, "messages": [system]}, schema)
    for messages in ([], [system, {"role": "user", "content": "hi"}]):
        jsonschema.validate({"model": MODEL, "messages": messages}, schema)
    r = httpx.post(f"{stack.base}/api/chat", json={"model": MODEL, "messages": [system]})
    assert r.status_code == 400 and "not a system message" in r.json()["error"]


def test_an_ollama_out_of_reach_is_a_502_in_ollamas_shape(tmp_path: Path) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    with memd_in_front(FakeUpstream().app, tmp_path / "d",
                       upstream_ollama_url=gone) as (base, _):
        chat = httpx.post(f"{base}/api/chat", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        tags = httpx.get(f"{base}/api/tags")
    assert chat.status_code == tags.status_code == 502
    assert "cannot reach" in chat.json()["error"] and "cannot reach" in tags.json()["error"]


def test_a_cross_site_request_is_refused(stack: Stack) -> None:
    r = stack.chat({"messages": [{"role": "user", "content": "hi"}]},
                   headers={"origin": "https://evil.example", "sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    assert stack.upstream.requests == []


def test_memds_own_upstream_key_never_reaches_ollama(tmp_path: Path) -> None:
    """memd's upstream key is the OpenAI-format server's; the client's own credentials
    go on in local mode, as on every door."""
    upstream = FakeOllama()
    with serve(upstream.app) as up, memd_in_front(
            FakeUpstream().app, tmp_path / "d", upstream_ollama_url=up,
            upstream_api_key="sk-memd-own") as (base, _):
        httpx.post(f"{base}/api/chat", json={"model": MODEL, "messages": [
            {"role": "user", "content": "hi"}]}, headers={"authorization": "Bearer mine"})
        httpx.get(f"{base}/api/tags")
    chat, tags = upstream.headers
    assert chat["authorization"] == "Bearer mine"
    assert "authorization" not in tags


def test_a_pinned_session_header_names_the_session(stack: Stack) -> None:
    """X-Memd-Session works on this door as on Chat Completions."""
    for text in ("What is the build command?", "And the test command?"):
        resp = stack.chat({"messages": [{"role": "user", "content": text}], "stream": False},
                          headers={"X-Memd-Session": "pinned-2"})
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-memd-session"] == "pinned-2"
    wait_for_messages(stack.engine, 4)
    assert [s.id for s in stack.engine.store.list_sessions("local")] == ["pinned-2"]
