"""Faults end to end: a model server scripted to call memd's memory tools when what it
needs lies only in an evicted read, through memd on a real port, to the official
``openai`` client, streaming and not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from servers import memd_in_front
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from virtual_session import agent_session

from memd.context_objects import ContextObject, object_passages
from memd.engine.memory import Memd
from memd.engine.virtual import faults
from memd.engine.virtual.fidelity import FULL
from memd.models.embedder import text_hash
from memd.types import Message

WINDOW = 16_384
MODEL = "fake-model"
# what the scripted model asks memory_query
ASKED = {"question": "which DEPLOY_PORT does the staging gateway use?"}
SECRET = "DEPLOY_PORT = 48213  # the staging gateway, see deploy/gateway_ports.toml"


class FaultingUpstream:
    """Calls ``tool`` (with ``args``) when memd's tools are offered and no result of it
    is in the request yet; else answers with the newest tool result's first line. With
    ``client_call``, calls a client tool in the same reply too."""

    def __init__(self, tool: str, args: dict[str, Any], client_call: bool = False) -> None:
        self.tool, self.args, self.client_call = tool, args, client_call
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat,
                                           methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        offered = {t["function"]["name"] for t in body.get("tools") or ()}
        last = body["messages"][-1]
        message: dict[str, Any]
        if self.tool in offered and last.get("tool_call_id") != "mem-1":
            calls = [{"id": "mem-1", "type": "function", "function": {
                "name": self.tool, "arguments": json.dumps(self.args)}}]
            if self.client_call:
                calls.append({"id": "own-1", "type": "function", "function": {
                    "name": "bash", "arguments": "{\"command\": \"ls\"}"}})
            message = {"role": "assistant", "content": None, "tool_calls": calls}
        else:
            message = {"role": "assistant", "content": "answer: " + str(last["content"])}
        if not body.get("stream"):
            return JSONResponse({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason":
                             "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return "data: " + json.dumps({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish}]}) + "\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        if message.get("tool_calls"):
            for i, tc in enumerate(message["tool_calls"]):
                events.append(chunk({"tool_calls": [{**tc, "index": i}]}))
            events.append(chunk({}, "tool_calls"))
        else:
            events += [chunk({"content": message["content"]}), chunk({}, "stop")]
        events.append("data: [DONE]\n\n")
        return StreamingResponse(iter(events), media_type="text/event-stream")


def history() -> list[dict[str, Any]]:
    """A replayed session, its first read holding ``SECRET``, ending on a tool result."""
    session = agent_session(turns=3)
    messages = [dict(m) for m in session.messages[:session.calls[-2]]]
    first = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    messages[first]["content"] = messages[first]["content"] + "\n" + SECRET
    return messages


def assert_queried(engine: Memd, marker: str) -> Message:
    """One micro-fault served and recorded with the answer, tokens avoided and its call's
    report; the session ends on the answer the client got (the fault round, whose call
    id is ``marker``, is not stored). That stored answer."""
    session = engine.store.list_sessions("local")[0]
    (fault,) = engine.store.faults("local", session.id)
    assert fault.kind == "query" and SECRET in fault.answer
    assert fault.tokens_avoided > 0
    report = engine.call("local", fault.call_id or "")["report"]
    assert [f["fault_id"] for f in report["virtual"]["faults"]] == [fault.fault_id]
    stored = engine.store.get_messages("local", session.id)[-1]
    assert stored.role == "assistant" and not stored.tool_calls
    assert marker not in json.dumps(stored.content)
    return stored


def held_read(engine: Memd) -> tuple[str, ContextObject]:
    """The session's id and its read holding ``SECRET``, held below full."""
    session = engine.store.list_sessions("local")[0]
    held = [o for o in engine.store.context_objects("local", session.id)
            if SECRET in o.content]
    assert held and held[0].fidelity != FULL
    return session.id, held[0]


def assert_restored(engine: Memd, session_id: str, read: ContextObject) -> None:
    """One fault served, a restore of ``read`` whole, which is held whole again."""
    (fault,) = engine.store.faults("local", session_id)
    assert fault.kind == "restore" and fault.object_ids[0] == read.object_id
    assert read.content in fault.answer  # whole
    again = {o.object_id: o for o in engine.store.context_objects("local", session_id)}
    assert again[read.object_id].fidelity == FULL


def restored_on_a_door(engine: Memd, upstream: Any, ask: Callable[[], Any]) -> Any:
    """A door's restore, end to end: a first call holds the read out; on the next the
    model restores it (beside a call of the client's: no further round), and the call
    after carries it whole (pinned). The restoring call's reply."""
    ask()
    session_id, read = held_read(engine)
    upstream.tool = faults.RESTORE
    upstream.args = {"object_id": read.object_id}
    reply = ask()
    assert len(upstream.requests) == 2  # no further round: the client's call stands
    assert_restored(engine, session_id, read)
    upstream.tool = "none"
    ask()
    assert SECRET in json.dumps(upstream.requests[-1])
    return reply


def forwarded_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body["messages"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_micro_fault_answers_from_an_evicted_read_and_the_client_never_sees_it(
        tmp_path: Path, stream: bool) -> None:
    messages = history()
    upstream = FaultingUpstream(faults.QUERY, ASKED)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        tools = agent_session(turns=1).tools
        if stream:
            chunks = list(client.chat.completions.create(
                model=MODEL, messages=messages, tools=tools,  # type: ignore[arg-type]
                max_tokens=1024, stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
        else:
            done = client.chat.completions.create(
                model=MODEL, messages=messages, tools=tools,  # type: ignore[arg-type]
                max_tokens=1024)
            text = done.choices[0].message.content or ""
            assert done.choices[0].message.tool_calls is None
        first, again = upstream.requests
        assert SECRET not in forwarded_text(first)  # the read was held out of the request
        assert {t["function"]["name"] for t in first["tools"]} >= faults.NAMES_OF_TOOLS
        result = again["messages"][-1]
        assert result["role"] == "tool" and result["tool_call_id"] == "mem-1"
        assert SECRET in result["content"]
        assert text.startswith("answer: ") and SECRET in text
        assert assert_queried(engine, "mem-1").content == text


def test_a_restore_brings_the_object_back_whole_and_keeps_the_client_call(
        tmp_path: Path) -> None:
    messages = history()
    upstream = FaultingUpstream(faults.RESTORE, {"object_id": ""}, client_call=True)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        # the first call holds the first read out; the model restores it on the next
        client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                       max_tokens=1024, extra_headers={
                                           "X-Memd-Virtualize": "off"})
        upstream.tool = "none"
        client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                       max_tokens=1024)
        session_id, read = held_read(engine)
        upstream.tool = faults.RESTORE
        upstream.args = {"object_id": read.object_id}
        done = client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                              max_tokens=1024)
        # memd served its call, the client's stays: it gets its own call only
        calls = done.choices[0].message.tool_calls or []
        assert [c.id for c in calls] == ["own-1"]
        assert_restored(engine, session_id, read)
        # the next call carries it whole (pinned), where it was degraded before
        upstream.tool = "none"
        client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                       max_tokens=1024)
        assert SECRET in forwarded_text(upstream.requests[-1])


def test_hybrid_search_finds_the_object_by_its_words(tmp_path: Path) -> None:
    from memd.context_objects import ContextObject
    from memd.models.embedder import FakeEmbedder

    def obj(i: int, text: str) -> ContextObject:
        return ContextObject(object_id=f"o{i}", user_id="u", session_id="s",
                             content_hash=str(i), object_type="tool_result",
                             source_tool="read", source_key=f"f{i}.py", tool_call_id=None,
                             turn_start=0, turn_end=0, content=text, compact="", stub="",
                             tokens_l0=100, tokens_l2=10, tokens_l3=5)
    objects = [obj(i, f"line {i}\nnothing here {i}") for i in range(20)]
    objects.append(obj(99, "def handler():\n    raise TimeoutError('gateway 504')"))
    hits = faults.search(objects, "where is the gateway TimeoutError raised?",
                         FakeEmbedder())
    assert hits[0].object.object_id == "o99"
    assert "TimeoutError" in hits[0].passage


def test_at_most_k_faults_per_call_then_the_client_gets_no_memory_call(
        tmp_path: Path) -> None:
    messages = history()
    upstream = FaultingUpstream(faults.QUERY, {"question": "DEPLOY_PORT"})
    upstream.chat = _always_calling(upstream)  # type: ignore[method-assign]
    upstream.app = Starlette(routes=[Route("/v1/chat/completions", upstream.chat,
                                           methods=["POST"])])
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW,
                       virtual_max_faults=2) as (base, engine):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        done = client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                              max_tokens=1024)
        assert done.choices[0].message.tool_calls is None
        assert done.choices[0].finish_reason == "stop"
        assert len(upstream.requests) == 3  # the call, and one more per fault served
        session = engine.store.list_sessions("local")[0]
        assert len(engine.store.faults("local", session.id)) == 2


def _always_calling(upstream: FaultingUpstream) -> Any:
    """The upstream's handler, made to call memory_query whatever the request holds."""
    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        upstream.requests.append(body)
        n = len(upstream.requests)
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{
                    "id": f"mem-{n}", "type": "function", "function": {
                        "name": faults.QUERY, "arguments": json.dumps(upstream.args)}}]}}]})
    return chat


def test_a_streamed_reply_calling_both_keeps_the_client_call_only(tmp_path: Path) -> None:
    messages = history()
    upstream = FaultingUpstream(faults.QUERY, {"question": "DEPLOY_PORT gateway"},
                                client_call=True)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=1024, stream=True))  # type: ignore[arg-type]
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        assert [(tc.index, tc.id, tc.function.name if tc.function else None)
                for tc in calls] == [(0, "own-1", "bash")]
        assert len(upstream.requests) == 1  # no further round: the client's call stands
        session = engine.store.list_sessions("local")[0]
        (fault,) = engine.store.faults("local", session.id)
        assert SECRET in fault.answer
        stored = engine.store.get_messages("local", session.id)[-1]
        assert [c["id"] for c in stored.tool_calls or ()] == ["own-1"]
        # erasing the read the answer quoted erases the fault too
        read = next(m for m in engine.store.get_messages("local", session.id)
                    if m.role == "tool" and SECRET in str(m.content))
        engine.erase_message("local", session.id, read.id)
        assert engine.store.faults("local", session.id) == []


@pytest.mark.parametrize("scope", ["session", "message"])
def test_erasing_leaves_no_embedding_of_what_a_micro_fault_searched(
        tmp_path: Path, scope: str) -> None:
    upstream = FaultingUpstream(faults.QUERY, {"question": "which DEPLOY_PORT does the "
                                                           "staging gateway use?"})
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        client.chat.completions.create(
            model=MODEL, messages=history(),  # type: ignore[arg-type]
            tools=agent_session(turns=1).tools, max_tokens=1024)  # type: ignore[arg-type]
        session = engine.store.list_sessions("local")[0]
        (fault,) = engine.store.faults("local", session.id)
        objects = engine.store.context_objects("local", session.id)
        (read,) = [o for o in objects if SECRET in o.content]
        derived = [text_hash(p) for p in object_passages(read.content)]
        derived.append(text_hash(fault.question))

        def cached() -> set[str]:
            return set(engine.store.get_cached_embeddings(engine.embedder.name, derived))

        assert cached() == set(derived)  # the micro-fault embedded them all
        admitted = {a.object_id for a in engine.store.admissions("local", session.id)}
        assert admitted  # the request came in under pressure
        if scope == "session":
            engine.erase_session("local", session.id)
        else:
            (message,) = [m for m in engine.store.get_messages("local", session.id)
                          if m.tool_call_id == read.tool_call_id]
            engine.erase_message("local", session.id, message.id)
        left = {a.object_id for a in engine.store.admissions("local", session.id)}
        assert left == (set() if scope == "session" else admitted - {read.object_id})
        assert cached() == set()
def test_a_fault_round_that_would_pass_the_window_gets_a_shortened_answer() -> None:
    from memd.models.tokens import count_text
    from memd.server.faults import _fitted

    long = "\n".join(f"line {i}: DEPLOY_PORT = {48000 + i}" for i in range(400))
    short = "a short answer"
    room = 300
    fitted = _fitted([long, short], room, MODEL)
    assert fitted[1] == short  # within its share: as served
    assert fitted[0].startswith("line 0:") and "shortened to fit" in fitted[0]
    assert sum(count_text(t, MODEL) for t in fitted) <= room
    assert _fitted([long], 10**6, MODEL) == [long]  # room enough: untouched


def test_a_round_keeps_within_what_the_request_left_of_the_window() -> None:
    from memd.engine.conversation.chat import PreparedCall
    from memd.engine.virtual.pressure import fit_line
    from memd.models.tokens import count_text
    from memd.server.fault_formats import MESSAGES_FAULTS
    from memd.server.faults import _Rounds

    # the virtualized request left 400 tokens of the window, the memory block took 100
    report = {"virtual": {"window": 4096, "tokens": {"forwarded": fit_line(4096) - 400}},
              "tokens": {"memory": 100}}
    call = PreparedCall("c1", None, [{"role": "user", "content": "go"}], [], report, True)
    rounds = _Rounds(call, MESSAGES_FAULTS, MODEL)
    turn = [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": faults.QUERY, "input": {}}]}]
    ours = [{"id": "t1", "function": {"name": faults.QUERY, "arguments": "{}"}}]
    long = "\n".join(f"line {i}: DEPLOY_PORT = {48000 + i}" for i in range(400))
    sent = rounds.again(turn, ours, [long])
    assert sent[:2] == [*call.forward, *turn]
    (block,) = sent[-1]["content"]
    assert block["tool_use_id"] == "t1" and block["content"].startswith("line 0:")
    assert "shortened to fit" in block["content"]
    assert count_text(block["content"], MODEL) <= 300
    # what is left for a further round shrinks by what this one added
    assert rounds.room is not None and 0 <= rounds.room < 100
