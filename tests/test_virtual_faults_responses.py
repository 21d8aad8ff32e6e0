"""Faults on the OpenAI Responses door: a model server scripted to call memd's memory
tools (``function_call`` items) when what it needs lies only in an evicted read,
through memd on a real port, to the official ``openai`` client's
``client.responses``, streaming and not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from responses_upstream import FakeResponses, last_text, message
from servers import memd_in_front
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from test_virtual_doors import responses_input, responses_tools
from test_virtual_faults import (
    ASKED,
    MODEL,
    SECRET,
    WINDOW,
    assert_queried,
    history,
    restored_on_a_door,
)
from virtual_session import agent_session

from memd.engine.formats import responses as r
from memd.engine.virtual import faults
from memd.engine.virtual.segment import text_of
from memd.server.fault_responses import RESPONSES_FAULTS

MEM_ID = "call_mem"


class FaultingResponses(FakeResponses):
    """Calls ``tool`` (with ``args``) after its reasoning when memd's tools are offered
    and no output of it is in the request yet; else answers "answer: <newest output>".
    With ``client_call``, calls a client tool in the same reply too."""

    def __init__(self, tool: str, args: dict[str, Any], client_call: bool = False) -> None:
        super().__init__()
        self.tool, self.args, self.client_call = tool, args, client_call
        self.app = Starlette(routes=[Route("/v1/responses", self.handle, methods=["POST"])])

    def _output(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        n = len(self.requests)
        offered = {t.get("name") for t in body.get("tools") or ()}
        answered = any(i.get("call_id") == MEM_ID and i.get("type") == "function_call_output"
                       for i in body["input"])
        out: list[dict[str, Any]] = [{"type": "reasoning", "id": f"rs_{n}", "summary": [],
                                      "encrypted_content": "gAAAA=="}]
        if self.tool in offered and not answered:
            out.append({"type": "function_call", "id": f"fc_mem_{n}", "call_id": MEM_ID,
                        "name": self.tool, "arguments": json.dumps(self.args),
                        "status": "completed"})
            if self.client_call:
                out.append({"type": "function_call", "id": f"fc_own_{n}",
                            "call_id": "call_own", "name": "bash",
                            "arguments": "{\"command\": \"ls\"}", "status": "completed"})
            return out
        return [*out, message("answer: " + last_text(body), n)]

    async def _events(self, response: dict[str, Any]) -> AsyncIterator[bytes]:
        async for event in super()._events(response):
            if b'"response.output_item.added"' in event and b'"function_call"' in event:
                await asyncio.sleep(0.05)  # the reasoning before the call goes on its own
            yield event


def request() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    instructions, items = responses_input(history())
    return instructions, items, responses_tools(agent_session(turns=1))


@pytest.mark.parametrize("stream", [False, True])
def test_a_micro_fault_answers_from_an_evicted_read_and_the_client_never_sees_it(
        tmp_path: Path, stream: bool) -> None:
    instructions, items, tools = request()
    upstream = FaultingResponses(faults.QUERY, ASKED)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine), \
            openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0) as client:
        if stream:
            with client.responses.stream(model=MODEL, instructions=instructions,
                                         input=items, tools=tools,  # type: ignore[arg-type]
                                         max_output_tokens=1024) as events:
                seen = [e for e in events]
                done = events.get_final_response()
            added = [e.item for e in seen if e.type == "response.output_item.added"]
            assert not any(i.type == "function_call" for i in added)
            assert not any(e.type == "response.function_call_arguments.delta" for e in seen)
            numbers = [e.sequence_number for e in seen]
            assert numbers == sorted(set(numbers))  # one stream, numbered on
            assert [e.type for e in seen].count("response.created") == 1
            assert [i.id for i in done.output][-1] == [i.id for i in added][-1]
        else:
            done = client.responses.create(model=MODEL, instructions=instructions,
                                           input=items, tools=tools,  # type: ignore[arg-type]
                                           max_output_tokens=1024)
        assert not any(i.type == "function_call" for i in done.output)
        text = done.output_text
        assert text.startswith("answer: ") and SECRET in text
        first, again = upstream.requests
        assert SECRET not in json.dumps(first["input"])  # the read was held out
        offered = {t["name"]: t for t in first["tools"]}
        assert set(offered) >= faults.NAMES_OF_TOOLS
        assert offered[faults.QUERY]["type"] == "function"
        assert offered[faults.QUERY]["parameters"]["required"] == ["question"]
        reasoning, call, result = again["input"][-3:]
        assert reasoning["type"] == "reasoning"  # the call goes back after its reasoning
        assert call["type"] == "function_call" and call["call_id"] == MEM_ID
        assert result == {"type": "function_call_output", "call_id": MEM_ID,
                          "output": result["output"]} and SECRET in result["output"]
        assert text in (text_of(assert_queried(engine, MEM_ID).content) or "")


@pytest.mark.parametrize("stream", [False, True])
def test_a_restore_brings_the_object_back_whole_and_keeps_the_client_call(
        tmp_path: Path, stream: bool) -> None:
    instructions, items, tools = request()
    upstream = FaultingResponses("none", {}, client_call=True)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine), \
            openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0) as client:

        def ask() -> Any:
            if not stream:
                return client.responses.create(model=MODEL, instructions=instructions,
                                               input=items, tools=tools,  # type: ignore[arg-type]
                                               max_output_tokens=1024)
            with client.responses.stream(model=MODEL, instructions=instructions,
                                         input=items, tools=tools,  # type: ignore[arg-type]
                                         max_output_tokens=1024) as events:
                return events.get_final_response()

        done = restored_on_a_door(engine, upstream, ask)
        # memd served its call, the client's stays: it gets its own call only
        calls = [i for i in done.output if i.type == "function_call"]
        assert [(c.call_id, c.name) for c in calls] == [("call_own", "bash")]


def test_memds_tools_go_as_function_tools_beside_the_clients() -> None:
    own = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
    tools = RESPONSES_FAULTS.tools(own)
    assert tools[0] == own[0]
    assert [(t["type"], t["name"], "parameters" in t) for t in tools[1:]] == [
        ("function", faults.QUERY, True), ("function", faults.RESTORE, True)]
    theirs = [{"type": "function", "name": faults.RESTORE}]
    assert RESPONSES_FAULTS.tools(theirs) == theirs


def _event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_a_held_stream_loses_memds_items_and_a_later_round_numbers_on() -> None:
    call = {"type": "function_call", "call_id": MEM_ID, "name": faults.QUERY,
            "arguments": "{}"}
    own = {"type": "function_call", "call_id": "call_own", "name": "bash",
           "arguments": "{}"}
    held = b"".join([
        _event("response.output_item.added", output_index=1, item=call),
        _event("response.output_item.done", output_index=1, item=call),
        _event("response.output_item.added", output_index=2, item=own),
        _event("response.output_item.done", output_index=2, item=own),
        _event("response.completed", response={"id": "resp_1", "output": [
            {"type": "reasoning"}, call, own]})])
    acc = RESPONSES_FAULTS.reader()
    acc.feed(held)
    stripped = RESPONSES_FAULTS.strip_stream(held, acc)
    assert MEM_ID.encode() not in stripped
    assert [json.loads(e.split(b"data: ")[1]).get("output_index")
            for e in stripped.split(b"\n\n") if e] == [1, 1, None]
    relay = RESPONSES_FAULTS.relay()
    first = _event("response.created", sequence_number=1, response={"id": "resp_1"}) \
        + _event("response.output_item.done", sequence_number=2, output_index=0,
                 item={"type": "reasoning", "id": "rs_1"})
    assert relay(first[:30]) + relay(first[30:]) == first  # as it came
    relay.next_round()
    later = relay(
        _event("response.created", sequence_number=1, response={"id": "resp_2"})
        + _event("response.output_item.done", sequence_number=2, output_index=0,
                 item={"type": "reasoning", "id": "rs_2"})
        + _event("response.completed", sequence_number=3, response={
            "id": "resp_2", "output": [{"type": "reasoning", "id": "rs_2"}]}))
    got = [json.loads(e.split(b"data: ")[1]) for e in later.split(b"\n\n") if e]
    assert [g["type"] for g in got] == ["response.output_item.done", "response.completed"]
    assert [g["sequence_number"] for g in got] == [3, 4]
    assert got[0]["output_index"] == 1
    assert [i["id"] for i in got[1]["response"]["output"]] == ["rs_1", "rs_2"]
    assert got[1]["response"]["id"] == "resp_1"  # one stream is one response
    assert r.reply(got[1]["response"]["output"])["content"][0]["id"] == "rs_1"


class KeepingResponses(FaultingResponses):
    """A :class:`FaultingResponses` that keeps its responses, as the real API does: a
    request continuing one (``previous_response_id``) that ends on a function call with
    no output for it in the request is refused, as the API refuses it."""

    def __init__(self, tool: str, args: dict[str, Any]) -> None:
        super().__init__(tool, args)
        self.kept: dict[str, list[dict[str, Any]]] = {}

    def _output(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        out = (super()._output(body) if isinstance(body["input"], list)
               else [message("answer: " + last_text(body), len(self.requests))])
        self.kept[f"resp_{len(self.requests)}"] = out
        return out

    async def handle(self, request: Any) -> Any:
        body = json.loads(await request.body())
        previous = body.get("previous_response_id")
        if previous is not None:
            calls = [i["call_id"] for i in self.kept.get(previous, ())
                     if i["type"] == "function_call"]
            given = {i.get("call_id") for i in body["input"] if isinstance(i, dict)}
            if previous not in self.kept or set(calls) - given:
                self.requests.append(body)
                return JSONResponse({"error": {
                    "message": f"No tool output found for function call {calls}.",
                    "type": "invalid_request_error", "param": "input", "code": None}},
                    status_code=400)
        return await super().handle(request)


@pytest.mark.parametrize("slow", [False, True], ids=["stored", "storing"])
def test_a_streamed_answer_with_faults_is_continued_by_the_id_its_client_saw(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: bool) -> None:
    """``storing``: the answer's store is still under way when the client continues it
    (it runs once the stream has ended): the continuation waits for it."""
    if slow:
        import memd.server.later as later

        real = later.in_thread

        async def slowly(fn: Any, *args: Any) -> Any:
            await asyncio.sleep(0.5)
            return await real(fn, *args)

        monkeypatch.setattr(later, "in_thread", slowly)
    instructions, items, tools = request()
    upstream = KeepingResponses(faults.QUERY, ASKED)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine), \
            openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0) as client:
        with client.responses.stream(model=MODEL, instructions=instructions, input=items,
                                     tools=tools,  # type: ignore[arg-type]
                                     max_output_tokens=1024) as events:
            for _ in events:
                pass
            done = events.get_final_response()
        assert len(upstream.requests) == 2  # memd served a memory_query round
        assert done.id == "resp_1"  # the first round's: the one the client saw
        later = client.responses.create(model=MODEL, previous_response_id=done.id,
                                        input="Thanks. Which port was it again?",
                                        max_output_tokens=256)
        sent = upstream.requests[-1]
        # the model server holds the whole exchange under the last round's id
        assert sent["previous_response_id"] == "resp_2"
        assert later.output_text == "answer: Thanks. Which port was it again?"
        session = engine.store.response_session("local", "resp_2")
        assert session is not None
        assert engine.store.response_session("local", "resp_1") == session
        said = [m.content for m in engine.store.get_messages("local", session)
                if m.role == "user"]
        assert said[-1] == "Thanks. Which port was it again?"  # a turn of the session
