"""Context virtualization through the Anthropic Messages and OpenAI Responses doors: the
replayed agent session (tests/virtual_session.py) as Claude Code or Codex would send it
(``tool_use`` / ``tool_result`` blocks; ``function_call`` / ``function_call_output``
items with reasoning), through memd on a real port, to a model server with a 16k window
that refuses any request over it, and any request the API would refuse as malformed (a
result without its call, a call without its result, reasoning followed by nothing).

The fake model servers count a request's tokens as memd counts them (its view in the
conversation model, its tools and the response reserve): memd's own accounting is what
this checks, as in tests/test_virtual_replay.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from servers import memd_in_front
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from virtual_session import AgentSession, agent_session, whole_or_admitted

from memd.engine.formats import anthropic as a
from memd.engine.formats import responses as r
from memd.engine.virtual import faults
from memd.engine.virtual.segment import text_of
from memd.models.tokens import message_tokens, tool_tokens

WINDOW = 16_384
RESERVE = 1_024
MODEL = "fake-model"


def _tokens(messages: list[dict[str, Any]], tools: Any, reserve: int) -> int:
    return sum(message_tokens(m, MODEL) for m in messages) + tool_tokens(tools, MODEL) \
        + reserve


# -- the session in each door's format -------------------------------------------------

def anthropic_messages(chat: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A Chat Completions history as a Messages request's ``system`` and ``messages``;
    a failing test run's result is marked ``is_error`` as Claude Code marks it."""
    system = chat[0]["content"]
    out: list[dict[str, Any]] = []
    for m in chat[1:]:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"])}
                       for c in m.get("tool_calls") or ()]
            out.append({"role": "assistant", "content": blocks})
        else:
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"],
                     "content": m["content"]}
            if "FAILED" in m["content"]:
                block["is_error"] = True
            if out[-1]["role"] == "user":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
    return system, out


def anthropic_tools(session: AgentSession) -> list[dict[str, Any]]:
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in session.tools]


def responses_input(chat: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A Chat Completions history as a Responses request's ``instructions`` and
    ``input``; each reply opens with a reasoning item, as a reasoning model's does."""
    items: list[dict[str, Any]] = []
    for k, m in enumerate(chat[1:]):
        if m["role"] == "user":
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": m["content"]}]})
        elif m["role"] == "assistant":
            items.append({"type": "reasoning", "id": f"rs_{k}", "summary": [],
                          "encrypted_content": "gAAAA=="})
            if m.get("content"):
                items.append({"type": "message", "role": "assistant", "id": f"msg_{k}",
                              "content": [{"type": "output_text", "text": m["content"],
                                           "annotations": []}]})
            items += [{"type": "function_call", "id": f"fc_{c['id']}", "call_id": c["id"],
                       "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]}
                      for c in m.get("tool_calls") or ()]
        else:
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": m["content"]})
    return chat[0]["content"], items


def responses_tools(session: AgentSession) -> list[dict[str, Any]]:
    return [{"type": "function", **t["function"]} for t in session.tools]


# -- what each API refuses ------------------------------------------------------------

def anthropic_faults(body: dict[str, Any]) -> list[str]:
    """What the Messages API would refuse in ``body``: roles that do not alternate from
    a user turn, a ``tool_result`` whose ``tool_use`` is not in the message before it, a
    ``tool_use`` not answered in the message after it."""
    out: list[str] = []
    messages = body["messages"]
    for k, m in enumerate(messages):
        if m["role"] != ("user" if k % 2 == 0 else "assistant"):
            out.append(f"messages[{k}] is {m['role']}")
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "user":
            before = messages[k - 1]["content"] if k else []
            asked = {b["id"] for b in before if isinstance(b, dict)
                     and b.get("type") == "tool_use"}
            answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
            out += [f"result {x} without its call" for x in sorted(answered - asked)]
            out += [f"call {x} without its result" for x in sorted(asked - answered)]
    return out


def responses_faults(body: dict[str, Any]) -> list[str]:
    """What the Responses API would refuse in ``body``: an output without its call, a
    call without its output, a reasoning item followed by nothing of its reply."""
    out: list[str] = []
    items = body["input"]
    called: set[str] = set()
    answered: set[str] = set()
    for k, item in enumerate(items):
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in called:
                out.append(f"output {item['call_id']} before its call")
            answered.add(item["call_id"])
        elif item.get("type") == "reasoning":
            after = items[k + 1] if k + 1 < len(items) else None
            if after is None or after.get("type") not in ("message", "function_call"):
                out.append(f"reasoning {item['id']} without its following item")
    out += [f"call {c} without its output" for c in sorted(called - answered)]
    return out


class WindowedDoors:
    """A model server of both formats with a ``WINDOW``-token window: a request over it,
    or one its API would refuse as malformed, gets a 400; any other gets the replayed
    assistant message (``answer``, in the Chat Completions shape)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.refused: list[str] = []
        self.answer: dict[str, Any] = {"role": "assistant", "content": "ok"}
        self.app = Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"])])

    @staticmethod
    def messages_tokens(body: dict[str, Any]) -> int:
        return _tokens(a.view(body).messages, body.get("tools"), body.get("max_tokens") or 0)

    @staticmethod
    def responses_tokens(body: dict[str, Any]) -> int:
        return _tokens(r.view(body).messages, body.get("tools"),
                       body.get("max_output_tokens") or 0)

    def _refuse(self, why: str) -> Response:
        self.refused.append(why)
        return JSONResponse({"type": "error", "error": {
            "type": "invalid_request_error", "message": why}}, status_code=400)

    async def messages(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        n = self.messages_tokens(body)
        if n > WINDOW:
            return self._refuse(f"prompt is too long: {n} tokens > {WINDOW} maximum")
        if faults := anthropic_faults(body):
            return self._refuse("; ".join(faults))
        _, [reply] = anthropic_messages([{"role": "system", "content": ""}, self.answer])
        return JSONResponse({
            "id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant",
            "model": MODEL, "content": reply["content"],
            "stop_reason": "tool_use" if self.answer.get("tool_calls") else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": n, "output_tokens": 5}})

    async def responses(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        n = self.responses_tokens(body)
        if n > WINDOW:
            return JSONResponse({"error": {
                "message": "Your input exceeds the context window of this model.",
                "type": "invalid_request_error", "code": "context_length_exceeded"}},
                status_code=400) if not self.refused.append("too long") else None
        if faults := responses_faults(body):
            return self._refuse("; ".join(faults))
        _, output = responses_input([{"role": "system", "content": ""}, self.answer])
        return JSONResponse({
            "id": f"resp_{len(self.requests)}", "object": "response", "created_at": 1,
            "status": "completed", "model": MODEL, "output": output,
            "usage": {"input_tokens": n, "output_tokens": 5, "total_tokens": n + 5}})


def _reports(base: str, ids: list[str]) -> list[dict[str, Any]]:
    with httpx.Client(base_url=base) as client:
        return [client.get(f"/v1/calls/{i}").json()["report"] for i in ids]


def _engaged(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    engaged = [x["virtual"] for x in reports if "virtual" in x]
    assert engaged and engaged[-1]["zone"] in ("warning", "critical", "emergency")
    assert {t["to"] for v in engaged for t in v["transitions"]} >= {"compact", "stub",
                                                                     "evicted"}
    return engaged


def user_words(content: Any) -> str:
    """A user message's own words, without the memory block memd may add before them."""
    if isinstance(content, str):
        return content
    return "".join(b["text"] for b in content if b.get("type") in ("text", "input_text")
                   and not b["text"].startswith("<memory"))


def _replay(tmp_path: Path, session: AgentSession, upstream: WindowedDoors, path: str,
            request: Callable[[list[dict[str, Any]]], dict[str, Any]],
            check: Callable[[dict[str, Any], dict[str, Any], int], None],
            ) -> list[dict[str, Any]]:
    """Send the session's calls one by one through memd's door at ``path`` as the agent
    would (``request`` makes a call's body of its history), ``check`` what went upstream
    (the body sent upstream, the client's, the call's place); the calls' reports."""
    ids: list[str] = []
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, _), \
            httpx.Client(base_url=base, timeout=120) as client:
        for at in session.calls:
            upstream.answer = session.messages[at]
            body = request(session.messages[:at])
            got = client.post(path, json=body)
            assert got.status_code == 200, got.text[:500]
            ids.append(got.headers["x-memd-call"])
            check(upstream.requests[-1], body, at)
        reports = _reports(base, ids)
    assert upstream.refused == []
    return reports


def test_a_claude_code_like_session_fits_the_window_through_the_messages_door(
        tmp_path: Path) -> None:
    session = agent_session(turns=4)
    tools = anthropic_tools(session)
    upstream = WindowedDoors()

    def request(history: list[dict[str, Any]]) -> dict[str, Any]:
        system, messages = anthropic_messages(history)
        return {"model": MODEL, "system": system, "messages": messages, "tools": tools,
                "max_tokens": RESERVE}

    def check(sent: dict[str, Any], body: dict[str, Any], at: int) -> None:
        assert WindowedDoors.messages_tokens(sent) <= WINDOW
        assert sent["system"] == body["system"] and sent["tools"][:len(tools)] == tools
        # memd's memory tools follow the client's while it holds results out
        assert {t["name"] for t in sent["tools"][len(tools):]} <= faults.NAMES_OF_TOOLS
        assert [user_words(m["content"]) for m in sent["messages"]
                if m["role"] == "user" and user_words(m["content"])] \
            == [m["content"] for m in session.messages[:at] if m["role"] == "user"]
        newest, mine = sent["messages"][-1]["content"], body["messages"][-1]["content"]
        # the newest result whole or its admitted excerpt, or the user's newest words
        assert whole_or_admitted(text_of(newest[-1]["content"]) or "",
                                 text_of(mine[-1]["content"]) or "") if isinstance(mine, list) \
            else user_words(newest) == mine

    reports = _replay(tmp_path, session, upstream, "/v1/messages", request, check)
    engaged = _engaged(reports)
    assert len(engaged) < len(reports)  # the first calls fit: forwarded as sent
    # a degraded result is its own block still: its id, its error flag, other content
    results = [b for sent in upstream.requests for m in sent["messages"]
               if isinstance(m["content"], list) for b in m["content"]
               if b["type"] == "tool_result"]
    degraded = [b for b in results if b["content"].startswith("[memd:")]
    assert degraded and all(b["tool_use_id"].startswith("call_") for b in degraded)
    assert any(b.get("is_error") for b in degraded)
    held = {h["object_id"] for v in engaged for h in v["held"]}
    assert all(any(o in b["content"] for o in held) for b in degraded)


def test_a_codex_like_session_fits_the_window_through_the_responses_door(
        tmp_path: Path) -> None:
    session = agent_session(turns=4)
    tools = responses_tools(session)
    upstream = WindowedDoors()

    def request(history: list[dict[str, Any]]) -> dict[str, Any]:
        instructions, items = responses_input(history)
        return {"model": MODEL, "instructions": instructions, "input": items,
                "tools": tools, "max_output_tokens": RESERVE, "store": False}

    def check(sent: dict[str, Any], body: dict[str, Any], at: int) -> None:
        assert WindowedDoors.responses_tokens(sent) <= WINDOW
        assert sent["instructions"] == body["instructions"]
        assert sent["tools"][:len(tools)] == tools  # then memd's, while it holds results out
        assert {t["name"] for t in sent["tools"][len(tools):]} <= faults.NAMES_OF_TOOLS
        assert [user_words(i["content"]) for i in sent["input"] if i.get("role") == "user"] \
            == [m["content"] for m in session.messages[:at] if m["role"] == "user"]
        newest, mine = sent["input"][-1], body["input"][-1]
        assert whole_or_admitted(newest["output"], mine["output"]) if "output" in mine \
            else user_words(newest["content"]) == user_words(mine["content"])

    reports = _replay(tmp_path, session, upstream, "/v1/responses", request, check)
    engaged = _engaged(reports)
    last = upstream.requests[-1]["input"]
    outputs = [i for i in last if i.get("type") == "function_call_output"]
    degraded = [i for sent in upstream.requests for i in sent["input"]
                if i.get("type") == "function_call_output" and i["output"].startswith("[memd:")]
    assert degraded and all(i["call_id"].startswith("call_") for i in degraded)
    evicted = {t["object_id"] for v in engaged for t in v["transitions"]
               if t["to"] == "evicted"}
    assert evicted and len(outputs) < sum(1 for i in responses_input(
        session.messages[:session.calls[-1]])[1] if i.get("type") == "function_call_output")


def test_without_memd_the_doors_session_is_refused(tmp_path: Path) -> None:
    """The same long history with ``X-Memd-Virtualize: off`` goes as sent and is over
    the window: both doors get the model server's refusal."""
    session = agent_session(turns=2)
    at = session.calls[-1]
    system, messages = anthropic_messages(session.messages[:at])
    instructions, items = responses_input(session.messages[:at])
    upstream = WindowedDoors()
    off = {"X-Memd-Virtualize": "off"}
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, _), \
            httpx.Client(base_url=base, timeout=60) as client:
        got = client.post("/v1/messages", headers=off, json={
            "model": MODEL, "system": system, "messages": messages,
            "tools": anthropic_tools(session), "max_tokens": RESERVE})
        assert got.status_code == 400 and "too long" in got.text
        got = client.post("/v1/responses", headers=off, json={
            "model": MODEL, "instructions": instructions, "input": items,
            "tools": responses_tools(session), "max_output_tokens": RESERVE})
        assert got.status_code == 400 and "context window" in got.text
        got = client.post("/v1/messages", headers={"X-Memd-Virtualize": "sometimes"},
                          json={"model": MODEL, "messages": messages[:1],
                                "max_tokens": RESERVE})
        assert got.status_code == 400 and "X-Memd-Virtualize" in got.text
    assert upstream.requests[0]["messages"] == messages
    assert upstream.requests[1]["input"] == items
    assert len(upstream.requests) == 2


def test_the_official_sdks_see_a_virtualized_call_answered(tmp_path: Path) -> None:
    """The ``anthropic`` and ``openai`` clients, streaming off, over a history past the
    window: the answer comes back as the model gave it."""
    session = agent_session(turns=2)
    at = session.calls[-2]
    upstream = WindowedDoors()
    upstream.answer = {"role": "assistant", "content": "All green."}
    system, messages = anthropic_messages(session.messages[:at])
    instructions, items = responses_input(session.messages[:at])
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, _):
        claude = anthropic.Anthropic(base_url=base, api_key="sk-test", max_retries=0)
        reply = claude.messages.create(
            model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
            tools=anthropic_tools(session), max_tokens=RESERVE)  # type: ignore[arg-type]
        assert [b.text for b in reply.content if b.type == "text"] == ["All green."]
        codex = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        answer = codex.responses.create(
            model=MODEL, instructions=instructions, input=items,  # type: ignore[arg-type]
            tools=responses_tools(session), max_output_tokens=RESERVE)  # type: ignore[arg-type]
        assert answer.output_text == "All green."
    assert upstream.refused == []
    assert all(WindowedDoors.messages_tokens(b) <= WINDOW if "messages" in b
               else WindowedDoors.responses_tokens(b) <= WINDOW for b in upstream.requests)


def test_an_evicted_call_beside_the_models_text_leaves_one_assistant_turn() -> None:
    """Evicting an exchange whose call came with text keeps the text; the next turn of
    the model joins it, so the roles still alternate; a degraded result keeps its id and
    flags."""
    body = {"messages": [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading first."},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "x = 1\n" * 50}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                      "content": "a.py\n" * 50, "is_error": True}]}]}
    seen = a.view(body)
    placed: list[dict[str, Any] | None] = list(seen.messages)
    calls = [k for k, m in enumerate(seen.messages) if m.get("tool_calls")]
    results = [k for k, m in enumerate(seen.messages) if m["role"] == "tool"]
    placed[calls[0]] = {k: v for k, v in seen.messages[calls[0]].items() if k != "tool_calls"}
    placed[results[0]] = None
    placed[results[1]] = {**seen.messages[results[1]], "content": "[memd: stub]"}
    assert a.forward(body, seen, placed) == [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading first."},
            {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                      "content": "[memd: stub]", "is_error": True}]}]
    assert a.forward(body, seen, list(seen.messages)) == body["messages"]


def test_a_streamed_claude_code_call_is_virtualized_and_relayed(tmp_path: Path) -> None:
    """The ``anthropic`` client streaming over a history past the window: the events
    come back as the model server sent them, and what it got fits."""
    from anthropic_upstream import FakeAnthropic

    session = agent_session(turns=2)
    at = session.calls[-2]  # the newest message holds tool results
    system, messages = anthropic_messages(session.messages[:at])
    upstream = FakeAnthropic()
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, _):
        claude = anthropic.Anthropic(base_url=base, api_key="sk-test", max_retries=0)
        with claude.messages.stream(
                model=MODEL, system=system, messages=messages,  # type: ignore[arg-type]
                max_tokens=RESERVE) as stream:
            text = "".join(stream.text_stream)
    sent = upstream.requests[-1]
    # this model server counts a request's bytes / 4 (its count_tokens, which memd's
    # counter calibrates to): the window is in its count
    assert len(upstream.raw[-1]) // 4 <= WINDOW < len(json.dumps(
        {**sent, "messages": messages})) // 4
    assert anthropic_faults(sent) == []
    got, mine = sent["messages"][-1]["content"][-1], messages[-1]["content"][-1]
    assert got["tool_use_id"] == mine["tool_use_id"]
    assert whole_or_admitted(text_of(got["content"]) or "", text_of(mine["content"]) or "")
    assert text == f"ok: {got['content']}"
