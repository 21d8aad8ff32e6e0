"""Faults on the Anthropic Messages door: a model server scripted to call memd's memory
tools (``tool_use`` blocks) when what it needs lies only in an evicted read, through
memd on a real port, to the official ``anthropic`` client, streaming and not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic_upstream import FakeAnthropic, last_text
from servers import memd_in_front
from test_virtual_doors import anthropic_messages, anthropic_tools
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

from memd.engine.formats import anthropic as a
from memd.engine.virtual import faults
from memd.engine.virtual.segment import text_of
from memd.server.fault_formats import MESSAGES_FAULTS

MEM_ID = "toolu_mem"


class FaultingAnthropic(FakeAnthropic):
    """Calls ``tool`` (with ``args``) after a line of text when memd's tools are offered
    and no result of it is in the request yet; else answers "answer: <newest tool
    result>". With ``client_call``, calls a client tool in the same reply too."""

    def __init__(self, tool: str, args: dict[str, Any], client_call: bool = False) -> None:
        super().__init__()
        self.tool, self.args, self.client_call = tool, args, client_call

    def _content(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        offered = {t["name"] for t in body.get("tools") or ()}
        last = body["messages"][-1]["content"]
        answered = isinstance(last, list) and any(
            b.get("tool_use_id") == MEM_ID for b in last)
        if self.tool in offered and not answered:
            out = [{"type": "text", "text": "Checking."},
                   {"type": "tool_use", "id": MEM_ID, "name": self.tool, "input": self.args}]
            if self.client_call:
                out.append({"type": "tool_use", "id": "toolu_own", "name": "bash",
                            "input": {"command": "ls"}})
            return out
        return [{"type": "text", "text": "answer: " + last_text(body)}]

    async def _events(self, message: dict[str, Any]) -> AsyncIterator[bytes]:
        async for event in super()._events(message):
            if b'"tool_use"' in event:
                await asyncio.sleep(0.05)  # the text before the call goes as a chunk of its own
            yield event


def request() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    system, messages = anthropic_messages(history())
    return system, messages, anthropic_tools(agent_session(turns=1))


def sent_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_micro_fault_answers_from_an_evicted_read_and_the_client_never_sees_it(
        tmp_path: Path, stream: bool) -> None:
    system, messages, tools = request()
    upstream = FaultingAnthropic(faults.QUERY, ASKED)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine), \
            anthropic.Anthropic(base_url=base, api_key="sk-test", max_retries=0) as claude:
        if stream:
            with claude.messages.stream(model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
                                        tools=tools, max_tokens=1024) as events:  # type: ignore[arg-type]
                text = "".join(events.text_stream)
                reply = events.get_final_message()
        else:
            reply = claude.messages.create(model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
                                           tools=tools, max_tokens=1024)  # type: ignore[arg-type]
            text = "".join(b.text for b in reply.content if b.type == "text")
        assert [b.type for b in reply.content if b.type == "tool_use"] == []
        assert reply.stop_reason == "end_turn"
        texts = [b.text for b in reply.content if b.type == "text"]
        assert texts[-1].startswith("answer: ") and SECRET in texts[-1]
        if stream:  # the first round's text, if it went before the call, then the answer
            assert texts[:-1] in ([], ["Checking."])
        first, again = upstream.requests
        # each round fits the window as this model server counts (bytes / 4, its
        # count_tokens, which memd's counter calibrates to)
        assert all(len(raw) // 4 <= WINDOW for raw in upstream.raw)
        assert SECRET not in sent_text(first)  # the read was held out of the request
        offered = {t["name"]: t for t in first["tools"]}
        assert set(offered) >= faults.NAMES_OF_TOOLS
        assert offered[faults.QUERY]["input_schema"]["required"] == ["question"]
        turn, result = again["messages"][-2:]
        assert turn["role"] == "assistant" and turn["content"][-1]["id"] == MEM_ID
        (block,) = result["content"]
        assert block["type"] == "tool_result" and block["tool_use_id"] == MEM_ID
        assert SECRET in block["content"]
        assert texts[-1] in (text_of(assert_queried(engine, MEM_ID).content) or "")
    if stream:
        assert text == "".join(texts)


@pytest.mark.parametrize("stream", [False, True])
def test_a_restore_brings_the_object_back_whole_and_keeps_the_client_call(
        tmp_path: Path, stream: bool) -> None:
    system, messages, tools = request()
    upstream = FaultingAnthropic("none", {}, client_call=True)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, engine), \
            anthropic.Anthropic(base_url=base, api_key="sk-test", max_retries=0) as claude:

        def ask() -> anthropic.types.Message:
            if not stream:
                return claude.messages.create(model=MODEL, system=system,  # type: ignore[arg-type]
                                              messages=messages, tools=tools,  # type: ignore[arg-type]
                                              max_tokens=1024)
            with claude.messages.stream(model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
                                        tools=tools, max_tokens=1024) as events:  # type: ignore[arg-type]
                return events.get_final_message()

        reply = restored_on_a_door(engine, upstream, ask)
        # memd served its call, the client's stays: it gets its own call only
        calls = [b for b in reply.content if b.type == "tool_use"]
        assert [(c.id, c.name) for c in calls] == [("toolu_own", "bash")]
        assert reply.stop_reason == "tool_use"


def test_memds_tools_go_in_anthropics_shape_beside_the_clients() -> None:
    own = [{"name": "bash", "description": "run", "input_schema": {"type": "object"}}]
    tools = MESSAGES_FAULTS.tools(own)
    assert tools[0] == own[0]
    assert [(t["name"], sorted(t)) for t in tools[1:]] == [
        (n, ["description", "input_schema", "name"]) for n in (faults.QUERY, faults.RESTORE)]
    # a client's own tool of that name is its own: memd adds none
    theirs = [{"name": faults.QUERY, "input_schema": {"type": "object"}}]
    assert MESSAGES_FAULTS.tools(theirs) == theirs


def _event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_a_held_stream_loses_memds_block_and_a_later_round_numbers_on() -> None:
    held = b"".join([
        _event("content_block_start", index=1, content_block={
            "type": "tool_use", "id": MEM_ID, "name": faults.QUERY, "input": {}}),
        _event("content_block_delta", index=1, delta={
            "type": "input_json_delta", "partial_json": "{}"}),
        _event("content_block_stop", index=1),
        _event("message_delta", delta={"stop_reason": "tool_use"}),
        _event("message_stop")])
    acc = a.StreamReply()
    acc.feed(_event("content_block_start", index=0, content_block={"type": "text",
                                                                   "text": ""}))
    acc.feed(held)
    stripped = MESSAGES_FAULTS.strip_stream(held, acc)
    assert MEM_ID.encode() not in stripped
    assert b'"stop_reason":"end_turn"' in stripped
    relay = MESSAGES_FAULTS.relay()
    assert relay(_event("message_start", message={"id": "m"})) \
        == _event("message_start", message={"id": "m"})  # the first round goes as it came
    first = _event("content_block_start", index=0, content_block={"type": "text"})
    assert relay(first[:20]) + relay(first[20:]) == first
    relay.next_round()
    later = relay(_event("message_start", message={"id": "m2"})
                  + _event("content_block_start", index=0, content_block={"type": "text"}))
    assert b"message_start" not in later
    assert json.loads(later.split(b"data: ")[1])["index"] == 1


class AlwaysFaulting(FaultingAnthropic):
    """Calls ``tool`` on every request, answered or not."""

    def _content(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": MEM_ID, "name": self.tool, "input": self.args}]


@pytest.mark.parametrize("stream", [False, True])
def test_past_k_faults_the_client_gets_the_reply_without_memds_call(
        tmp_path: Path, stream: bool) -> None:
    system, messages, tools = request()
    upstream = AlwaysFaulting(faults.QUERY, ASKED)
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW,
                       virtual_max_faults=1) as (base, engine), \
            anthropic.Anthropic(base_url=base, api_key="sk-test", max_retries=0) as claude:
        if stream:
            with claude.messages.stream(model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
                                        tools=tools, max_tokens=1024) as events:  # type: ignore[arg-type]
                reply = events.get_final_message()
        else:
            reply = claude.messages.create(model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
                                           tools=tools, max_tokens=1024)  # type: ignore[arg-type]
        assert len(upstream.requests) == 2  # the call, and one more for the fault served
        assert [b.type for b in reply.content if b.type != "text"] == []
        assert reply.stop_reason == "end_turn"
        session = engine.store.list_sessions("local")[0]
        assert len(engine.store.faults("local", session.id)) == 1
