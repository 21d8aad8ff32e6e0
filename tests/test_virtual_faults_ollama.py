"""Faults on the Ollama door: an Ollama server scripted to call memd's memory tools
(``message.tool_calls``, arguments as an object) when what it needs lies only in an
evicted read, through memd on a real port, driven over HTTP as Ollama's clients drive
it, streaming (NDJSON) and not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from ollama_upstream import FakeOllama
from servers import FakeUpstream, memd_in_front, serve
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

from memd.engine.formats import ollama as o
from memd.engine.memory import Memd
from memd.engine.virtual import faults
from memd.models.tokens import count_text
from memd.server.fault_ollama import OLLAMA_FAULTS

OWN_CALL = {"function": {"name": "read_file", "arguments": {"path": "setup.cfg"}}}


class FaultingOllama(FakeOllama):
    """Calls ``tool`` (with ``args``) when memd's tools are offered and no result of it
    is in the request yet; else answers "answer: <newest message's text>". With
    ``client_call``, calls a client tool in the same reply too; with ``always``, calls
    ``tool`` whatever the request holds."""

    def __init__(self, tool: str, args: dict[str, Any], client_call: bool = False,
                 always: bool = False) -> None:
        super().__init__()
        self.tool, self.args = tool, args
        self.client_call, self.always = client_call, always

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        offered = {t["function"]["name"] for t in body.get("tools") or ()}
        last = body["messages"][-1]
        answered = last.get("role") == "tool" and last.get("tool_name") == self.tool
        if self.tool in offered and (self.always or not answered):
            calls = [{"function": {"name": self.tool, "arguments": self.args}}]
            if self.client_call:
                calls.append(OWN_CALL)
            return {"role": "assistant", "content": "", "tool_calls": calls}
        return {"role": "assistant", "content": "answer: " + str(last.get("content"))}


def ollama_messages(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Chat Completions history as Ollama's clients send it: arguments as objects,
    results named by their tool, not by a call id."""
    names = {c["id"]: c["function"]["name"] for m in chat for c in m.get("tool_calls") or ()}
    out: list[dict[str, Any]] = []
    for m in chat:
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            if m.get("tool_calls"):
                msg["tool_calls"] = [{"function": {
                    "name": c["function"]["name"],
                    "arguments": json.loads(c["function"]["arguments"])}}
                    for c in m["tool_calls"]]
            out.append(msg)
        elif m["role"] == "tool":
            out.append({"role": "tool", "content": m["content"],
                        "tool_name": names[m["tool_call_id"]]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def request(stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "messages": ollama_messages(history()), "stream": stream,
            "tools": agent_session(turns=1).tools, "options": {"num_ctx": WINDOW}}


def lines(resp: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


def reply_of(resp: httpx.Response, stream: bool) -> dict[str, Any]:
    """The message the client got: the lines' pieces joined, when streamed (after
    checking that the stream ends on its one ``done`` line)."""
    assert resp.status_code == 200, resp.text
    if not stream:
        return dict(resp.json()["message"])
    got = lines(resp)
    assert [g["done"] for g in got][-1] is True
    assert sum(1 for g in got if g["done"]) == 1
    calls = [c for g in got for c in g["message"].get("tool_calls") or ()]
    out: dict[str, Any] = {"content": "".join(g["message"].get("content") or ""
                                              for g in got)}
    if calls:
        out["tool_calls"] = calls
    return out


@pytest.fixture
def ollama_memd(tmp_path: Path) -> Iterator[Any]:
    """``make(upstream, **settings)``: memd in front of the scripted Ollama server
    ``upstream``, its base URL and engine (one pair per test)."""
    stack = ExitStack()

    def make(upstream: FaultingOllama, **settings: Any) -> tuple[str, Memd]:
        up = stack.enter_context(serve(upstream.app))
        return stack.enter_context(memd_in_front(
            FakeUpstream().app, tmp_path, upstream_ollama_url=up, **settings))

    with stack:
        yield make


@pytest.mark.parametrize("stream", [False, True])
def test_a_micro_fault_answers_from_an_evicted_read_and_the_client_never_sees_it(
        ollama_memd: Any, stream: bool) -> None:
    upstream = FaultingOllama(faults.QUERY, ASKED)
    base, engine = ollama_memd(upstream)
    resp = httpx.post(f"{base}/api/chat", json=request(stream), timeout=60)
    reply = reply_of(resp, stream)
    assert "tool_calls" not in reply  # the client never sees memd's call
    assert reply["content"].startswith("answer: ") and SECRET in reply["content"]
    first, again = upstream.requests
    assert SECRET not in json.dumps(first["messages"])  # the read was held out
    assert all(count_text(json.dumps(r), MODEL) <= WINDOW for r in upstream.requests)
    offered = {t["function"]["name"]: t for t in first["tools"]}
    assert set(offered) >= faults.NAMES_OF_TOOLS
    assert offered[faults.QUERY]["type"] == "function"
    assert offered[faults.QUERY]["function"]["parameters"]["required"] == ["question"]
    turn, result = again["messages"][-2:]
    # the round appends the call as Ollama made it (arguments an object), then its result
    assert turn["role"] == "assistant"
    assert turn["tool_calls"] == [{"function": {"name": faults.QUERY, "arguments": ASKED}}]
    assert result["role"] == "tool" and result["tool_name"] == faults.QUERY
    assert SECRET in result["content"]
    assert again["stream"] is stream and again["options"] == {"num_ctx": WINDOW}
    stored = assert_queried(engine, faults.QUERY)
    assert stored.content == reply["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_restore_brings_the_object_back_whole_and_keeps_the_client_call(
        ollama_memd: Any, stream: bool) -> None:
    upstream = FaultingOllama("none", {}, client_call=True)
    base, engine = ollama_memd(upstream)

    def ask() -> dict[str, Any]:
        return reply_of(httpx.post(f"{base}/api/chat", json=request(stream), timeout=60),
                        stream)

    reply = restored_on_a_door(engine, upstream, ask)
    # memd served its call, the client's stays: it gets its own call only
    assert reply["tool_calls"] == [OWN_CALL]


@pytest.mark.parametrize("stream", [False, True])
def test_past_k_faults_the_client_gets_the_reply_without_memds_call(
        ollama_memd: Any, stream: bool) -> None:
    upstream = FaultingOllama(faults.QUERY, ASKED, always=True)
    base, engine = ollama_memd(upstream, virtual_max_faults=2)
    reply = reply_of(httpx.post(f"{base}/api/chat", json=request(stream), timeout=60),
                     stream)
    assert "tool_calls" not in reply
    assert len(upstream.requests) == 3  # the call, and one more per fault served
    session = engine.store.list_sessions("local")[0]
    assert len(engine.store.faults("local", session.id)) == 2


def test_memds_tools_go_in_ollamas_shape_beside_the_clients() -> None:
    own = agent_session(turns=1).tools
    tools = OLLAMA_FAULTS.tools(own)
    assert tools[:len(own)] == own
    assert [(t["type"], t["function"]["name"]) for t in tools[len(own):]] == [
        ("function", faults.QUERY), ("function", faults.RESTORE)]


def _line(message: dict[str, Any], done: bool = False) -> bytes:
    return json.dumps({"model": MODEL, "message": message, "done": done}).encode() + b"\n"


def test_the_relay_sends_whole_lines_without_memds_calls() -> None:
    mine = {"function": {"name": faults.QUERY, "arguments": ASKED}}
    relay = OLLAMA_FAULTS.relay()
    text = _line({"role": "assistant", "content": "Chec"})
    both = _line({"role": "assistant", "content": "", "tool_calls": [mine, OWN_CALL]})
    # a line split across chunks goes once whole, never its first half alone
    assert relay(text + both[:30]) == text
    out = relay(both[30:])
    assert json.loads(out)["message"]["tool_calls"] == [OWN_CALL]
    # a line of memd's call alone says nothing left: it is left out
    assert relay(_line({"role": "assistant", "content": "", "tool_calls": [mine]})) == b""
    # the last line goes even without its newline; the done line stays
    done = _line({"role": "assistant", "content": ""}, done=True)
    assert relay(done[:-1]) == done
    # stored as the client will send it back: its call's id made of its place among the
    # calls the client got
    acc = OLLAMA_FAULTS.reader()
    acc.feed(text + both + done)
    assert OLLAMA_FAULTS.stored(acc) == o.assistant(
        {"role": "assistant", "content": "Chec", "tool_calls": [OWN_CALL]})
    # a later round drops what was left of a line of the round memd answered
    relay(both[:30])
    relay.next_round()
    assert relay(text) == text

