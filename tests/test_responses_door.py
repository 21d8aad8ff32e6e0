"""The OpenAI Responses door end to end: memd on a real uvicorn port in front of a
scripted upstream that serves both OpenAI APIs, driven by the official ``openai``
client's ``responses``, streaming and not."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner
from responses_upstream import ENCRYPTED, FakeResponses
from servers import FakeUpstream, memd_in_front, poll, wait_for_messages
from starlette.routing import Route

from memd.cli import main
from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.conversation.chains import content_text
from memd.engine.memory import Memd
from memd.server.doors import NO_PLACE

HOST = "staging.rocket.internal"
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
DEVELOPER = {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "You are a coding agent."}]}
ENVIRONMENT = {"type": "message", "role": "user", "content": [{
    "type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n"
                                  "</environment_context>"}]}


@dataclass
class Stack:
    base: str
    upstream: FakeResponses
    chat: FakeUpstream
    engine: Memd

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key="sk-test", max_retries=0)

    def stored(self) -> list[Any]:
        (session,) = self.engine.store.list_sessions("local")
        return self.engine.messages(session.id, "local")



@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    upstream, chat = FakeResponses(), FakeUpstream()
    # ahead of the fake's own "ok" answer to the same path
    chat.app.router.routes.insert(0, Route("/v1/responses", upstream.handle,
                                           methods=["POST"]))
    with memd_in_front(chat.app, tmp_path / "d") as (base, engine):
        yield Stack(base, upstream, chat, engine)


def block_of(request: dict[str, Any]) -> str:
    for item in request["input"]:
        for part in item.get("content") or () if isinstance(item.get("content"), list) else ():
            text = part.get("text") or ""
            if part.get("type") == "input_text" and text.startswith(USER_OPEN):
                return text[len(USER_OPEN):text.index(USER_CLOSE)]
    return ""


def without_block(request: dict[str, Any]) -> list[Any]:
    items = copy.deepcopy(request["input"])
    for item in items:
        if isinstance(item.get("content"), list):
            item["content"] = [p for p in item["content"] if not (
                p.get("type") == "input_text" and p["text"].startswith(USER_OPEN))]
    return items


def tool_task(client: openai.OpenAI, prompt: str, *, stream: bool) -> list[Any]:
    """A two-step tool task as Codex runs it (no state upstream: the reasoning item comes
    back with its encrypted content); returns the items it sent last."""
    items: list[Any] = [DEVELOPER, ENVIRONMENT, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": prompt}]}]
    for _ in range(2):
        kw: dict[str, Any] = {"model": "gpt-5-codex", "input": items, "tools": TOOLS,
                              "store": False, "include": ["reasoning.encrypted_content"]}
        if stream:
            with client.responses.stream(**kw) as s:
                reply = s.get_final_response()
        else:
            reply = client.responses.create(**kw)
        output = [o.model_dump(exclude_none=True) for o in reply.output]
        items = [*items, *output]
        call = output[-1]
        if call["type"] != "function_call":
            break
        items.append({"type": "function_call_output", "call_id": call["call_id"],
                      "output": "make; pytest"})
    return items


@pytest.mark.parametrize("stream", [False, True])
def test_tool_task_is_forwarded_unchanged_and_stored_once(stack: Stack, stream: bool) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    sent = tool_task(stack.client(), f"Deploy to the staging host {HOST} after tests",
                     stream=stream)
    first, second = stack.upstream.requests
    assert without_block(second) == sent[:-2]  # the last reply is not sent again
    assert second["tools"] == TOOLS and second["include"] == ["reasoning.encrypted_content"]
    assert second["input"][3]["encrypted_content"] == ENCRYPTED
    # the block is in the user's typed message, the same on both steps, never elsewhere
    assert HOST in block_of(first)
    assert first["input"][2] == second["input"][2]
    assert first["input"][:2] == [DEVELOPER, ENVIRONMENT]
    # one session, each turn once: the two user messages, the call, its output, the answer
    wait_for_messages(stack.engine, 5)
    stored = stack.stored()
    assert [m.role for m in stored] == ["user", "user", "assistant", "tool", "assistant"]
    assert stored[2].tool_calls[0]["function"]["name"] == "read_file"
    assert content_text(stored[4].content) == "ok: make; pytest"
    calls = stack.engine.calls("local")
    assert [c["metadata"]["usage"]["cache_read_input_tokens"] for c in calls] == [64, 64]


def test_stream_events_arrive_in_order_and_unchanged(stack: Stack) -> None:
    with stack.client().responses.stream(model="gpt-5-codex", input="Say hi") as s:
        events = [(e.type, e.sequence_number) for e in s]
    assert [k for k, _ in events][:2] == ["response.created", "response.output_item.added"]
    assert events[-1][0] == "response.completed"
    assert [n for _, n in events] == list(range(1, len(events) + 1))


def test_a_string_input_gets_the_block_before_it(stack: Stack) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    reply = stack.client().responses.create(model="gpt-5", input="Which staging host?")
    assert reply.output_text.startswith("ok: ")
    sent = stack.upstream.requests[-1]["input"]
    assert isinstance(sent, str) and sent.startswith(USER_OPEN) and HOST in sent
    assert sent.endswith("Which staging host?")


def test_a_fact_told_to_codex_reaches_a_chat_completions_client(stack: Stack) -> None:
    stack.client().responses.create(model="gpt-5-codex", input=[
        ENVIRONMENT, {"role": "user", "content": f"Remember: the staging host is {HOST}."}])
    wait_for_messages(stack.engine, 3)
    # the memory is written by a queued job (the full write path), off the chat path
    poll(lambda: any(HOST in m.text for m in stack.engine.store.iter_memories("local")),
         "the memory of the Codex turn")
    stack.client().chat.completions.create(model="gpt-4o", messages=[
        {"role": "user", "content": "What is the staging host again?"}])
    forwarded = stack.chat.requests[-1]["messages"][-1]["content"]
    assert HOST in forwarded and forwarded.startswith(USER_OPEN)


def test_previous_response_id_goes_as_sent_without_memory(stack: Stack) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    r = httpx.post(f"{stack.base}/v1/responses", json={
        "model": "gpt-5", "previous_response_id": "resp_9",
        "input": [{"role": "user", "content": "And the staging host?"}]})
    assert r.status_code == 200, r.text
    assert r.headers["x-memd-side"] == "true"
    assert stack.upstream.requests[-1]["input"] == [
        {"role": "user", "content": "And the staging host?"}]
    assert stack.upstream.requests[-1]["previous_response_id"] == "resp_9"
    assert stack.engine.store.list_sessions("local") == []
    report = httpx.get(f"{stack.base}/v1/calls/{r.headers['x-memd-call']}").json()["report"]
    assert report["mode"] == "side"
    assert report["previous_response"] == {
        "id": "resp_9", "outcome": "without memory: previous response unknown"}


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_continues_its_session(stack: Stack, stream: bool) -> None:
    """A request that names a response memd stored is a turn of that response's
    session: its new items are stored once after the session's turns, and get memory.
    (Streamed, the user's items hold input_text parts, as Codex sends them.)"""
    client = stack.client()

    def ask(text: str, previous: str | None = None) -> tuple[str, str]:
        extra = {"previous_response_id": previous} if previous else {}
        content: Any = [{"type": "input_text", "text": text}] if stream else text
        raw = client.responses.with_raw_response.create(
            model="gpt-5", input=[{"role": "user", "content": content}], stream=stream,
            store=True, **extra)
        if stream:
            (done,) = [e for e in raw.parse() if e.type == "response.completed"]
            return done.response.id, raw.headers["x-memd-call"]
        return raw.parse().id, raw.headers["x-memd-call"]

    stack.engine.add(f"the staging host is {HOST}", "local")
    first, _ = ask("We deploy on Fridays.")
    wait_for_messages(stack.engine, 2)
    (session,) = stack.engine.store.list_sessions("local")
    second, call = ask("Which staging host again?", first)
    sent = stack.upstream.requests[-1]
    assert sent["previous_response_id"] == first
    (item,) = sent["input"]  # only the new item goes, the block in it
    said = item["content"] if isinstance(item["content"], str) else "".join(
        p["text"] for p in item["content"])
    assert said.startswith(USER_OPEN) and HOST in said
    assert said.endswith("Which staging host again?")
    wait_for_messages(stack.engine, 4)
    third, _ = ask("Thanks.", second)
    wait_for_messages(stack.engine, 6)
    assert [x.id for x in stack.engine.store.list_sessions("local")] == [session.id]
    said = [content_text(m.content) for m in stack.engine.messages(session.id, "local")]
    assert said[0::2] == ["We deploy on Fridays.", "Which staging host again?", "Thanks."]
    # the fake answers "ok: " and what it was sent, the block included
    assert all(a.startswith("ok: ") and a.endswith(q) for q, a in zip(
        said[0::2], said[1::2], strict=True))
    report = httpx.get(f"{stack.base}/v1/calls/{call}").json()["report"]
    assert report["previous_response"] == {"id": first,
                                           "outcome": f"continued session {session.id}"}
    assert third != second != first
    out = CliRunner().invoke(main, ["calls", "--data-dir",
                                    str(stack.engine.settings.data_dir)])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert [f"continued session {session.id}" in line for line in lines] == [
        True, True, False]


def test_a_continuation_the_client_marks_as_a_side_request_is_one(stack: Stack) -> None:
    first = stack.client().responses.create(model="gpt-5", input="Hello there.")
    wait_for_messages(stack.engine, 2)
    r = httpx.post(f"{stack.base}/v1/responses", headers={"X-Memd-Memory": "off"}, json={
        "model": "gpt-5", "previous_response_id": first.id, "input": "Summarize."})
    assert r.status_code == 200 and r.headers["x-memd-side"] == "true"
    assert stack.upstream.requests[-1]["input"] == "Summarize."
    (session,) = stack.engine.store.list_sessions("local")
    assert len(stack.engine.messages(session.id, "local")) == 2


def test_a_previous_response_of_another_workspace_is_unknown(stack: Stack) -> None:
    first = stack.client().responses.create(model="gpt-5", input="Hello there.")
    wait_for_messages(stack.engine, 2)
    r = httpx.post(f"{stack.base}/w/other/v1/responses", json={
        "model": "gpt-5", "previous_response_id": first.id, "input": "Go on."})
    assert r.status_code == 200 and r.headers["x-memd-side"] == "true"
    assert stack.upstream.requests[-1]["input"] == "Go on."
    assert len(stack.engine.store.list_sessions("local")) == 1


def test_bad_bodies_are_400(stack: Stack) -> None:
    for body in ({"model": "m"}, {"input": []}, {"input": "x", "stream": "yes"},
                 {"input": "x", "max_output_tokens": -1}, {"input": 5},
                 {"input": [{"role": "user", "content": "x"}, None]},
                 {"input": [{"type": "w", "role": "user", "content": [None]}]},
                 {"input": "x", "previous_response_id": 5},
                 # instructions alone, a continuation or not: nothing to answer
                 {"input": [{"role": "developer", "content": "Be brief."}]},
                 {"input": [{"role": "system", "content": "x"}],
                  "previous_response_id": "resp_1"}):
        r = httpx.post(f"{stack.base}/v1/responses", json=body)
        assert r.status_code == 400, (body, r.text)
    assert stack.upstream.requests == []
    # a tool call's output alone is a turn the model answers
    r = httpx.post(f"{stack.base}/v1/responses", json={"model": "m", "input": [
        {"type": "function_call_output", "call_id": "call_1", "output": "done"}]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_as_too_long_goes_again_without_memory(stack: Stack, stream: bool) -> None:
    stack.engine.add(f"the staging host is {HOST}", "local")
    stack.upstream.refuse_memory = True
    sent = [DEVELOPER, {"role": "user", "content": "Which staging host do we deploy to?"}]
    raw = stack.client().responses.with_raw_response.create(
        model="gpt-5-codex", input=sent, stream=stream)
    assert raw.http_response.status_code == 200
    if stream:
        done = [e for e in raw.parse() if e.type == "response.completed"]
        assert done[0].response.output_text.startswith("ok: ")
    else:
        assert raw.parse().output_text.startswith("ok: ")
    first, second = stack.upstream.requests
    assert first["input"][1]["content"].startswith(USER_OPEN) and HOST in \
        first["input"][1]["content"]
    assert second["input"] == sent
    call = httpx.get(f"{stack.base}/v1/calls/{raw.headers['x-memd-call']}").json()
    assert call["metadata"]["retried"] is True and call["status"] == 200
    assert call["report"]["injected"] is None
    assert call["report"]["window"] == {"tokens": 400000, "source": "builtin",
                                        "detail": "gpt-5*"}


def test_a_continued_tool_loop_is_stored_once_and_sent_as_is(stack: Stack) -> None:
    """After a function call, the continuing request holds only its output: no message
    of the user's to put the block in (the prompt is the model server's to keep), so it
    goes as sent, and its report says so."""
    stack.engine.add(f"the staging host is {HOST}", "local")
    client = stack.client()
    first = client.responses.create(model="gpt-5", tools=TOOLS, input=[
        {"role": "user", "content": "Deploy to the staging host."}])
    (call,) = [i for i in first.output if i.type == "function_call"]
    wait_for_messages(stack.engine, 2)
    output = [{"type": "function_call_output", "call_id": call.call_id, "output": "done"}]
    raw = client.responses.with_raw_response.create(
        model="gpt-5", tools=TOOLS, previous_response_id=first.id, input=output)
    assert raw.parse().output_text == "ok: done"
    assert stack.upstream.requests[-1]["input"] == output
    wait_for_messages(stack.engine, 4)
    (session,) = stack.engine.store.list_sessions("local")
    roles = [m.role for m in stack.engine.messages(session.id, "local")]
    assert roles == ["user", "assistant", "tool", "assistant"]
    report = httpx.get(f"{stack.base}/v1/calls/{raw.headers['x-memd-call']}").json()["report"]
    assert report["injected"] is None and report["tokens"]["memory"] == 0
    assert report["reason"] == NO_PLACE and report["dropped"]["tokens"] > 0
