"""Context virtualization end to end: a replayed agent session of 160 tool calls and
250k tokens of tool output, through memd on a real port, to a model server with a 16k
window that refuses any request over it.

The fake model server counts a request's tokens as memd counts them for its model (its
messages, its tool definitions and the response reserve): memd's own accounting is what
this checks, not a tokenizer's calibration (memd.server.windows measures that).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
from servers import FakeUpstream, memd_in_front
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from virtual_session import AgentSession, agent_session, whole_or_admitted

from memd.models.tokens import message_tokens

WINDOW = 16_384
RESERVE = 1_024
MODEL = "fake-model"


class WindowedUpstream:
    """A model server with a ``WINDOW``-token window: a request over it gets the 400 a
    llama.cpp server gives; any other gets ``answer`` (the replayed assistant message)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.refused = 0
        self.answer: dict[str, Any] = {"role": "assistant", "content": "ok"}
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat,
                                           methods=["POST"])])

    @staticmethod
    def tokens(body: dict[str, Any]) -> int:
        tools = json.dumps(body["tools"], sort_keys=True) if body.get("tools") else ""
        return (sum(message_tokens(m, MODEL) for m in body["messages"])
                + message_tokens({"content": tools}, MODEL) + (body.get("max_tokens") or 0))

    async def chat(self, request: Request) -> Response:
        self.raw.append(await request.body())
        body = json.loads(self.raw[-1])
        self.requests.append(body)
        n = self.tokens(body)
        if n > WINDOW:
            self.refused += 1
            return JSONResponse({"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": f"the request exceeds the available context size ({n} > "
                           f"{WINDOW} tokens)"}}, status_code=400)
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "message": self.answer,
                         "finish_reason": "tool_calls" if self.answer.get("tool_calls")
                         else "stop"}],
            "usage": {"prompt_tokens": n, "completion_tokens": 5, "total_tokens": n + 5}})


def orphans(messages: list[dict[str, Any]]) -> list[str]:
    """Tool messages without their call before them, and calls without their result."""
    called: set[str] = set()
    answered: set[str] = set()
    out: list[str] = []
    for m in messages:
        for call in m.get("tool_calls") or ():
            called.add(call["id"])
        if m["role"] == "tool":
            if m["tool_call_id"] not in called:
                out.append(f"result {m['tool_call_id']} before its call")
            answered.add(m["tool_call_id"])
    out += [f"call {c} without its result" for c in sorted(called - answered)]
    return out


def user_text(content: str) -> str:
    """A user message's own words, after the memory block memd may put before them."""
    return content.split("</memory>\n\n", 1)[1] if content.startswith("<memory") else content


def replay(session: AgentSession, base: str, upstream: WindowedUpstream,
           headers: dict[str, str] | None = None) -> tuple[list[str], set[str]]:
    """Send the session's calls one by one as the agent would; the call ids and the
    sessions memd put them in."""
    ids = []
    sessions = set()
    with httpx.Client(base_url=base, timeout=120) as client:
        for at in session.calls:
            upstream.answer = session.messages[at]
            r = client.post("/v1/chat/completions", headers=headers or {}, json={
                "model": MODEL, "messages": session.messages[:at], "tools": session.tools,
                "max_tokens": RESERVE})
            assert r.status_code == 200, r.text[:500]
            ids.append(r.headers["x-memd-call"])
            sessions.add(r.headers["x-memd-session"])
    return ids, sessions


def test_a_replayed_agent_session_fits_a_16k_window_losing_nothing_it_must_not(
        tmp_path: Path, backend: str) -> None:
    session = agent_session()
    assert session.tool_calls >= 150 and session.tool_tokens() > 200_000
    assert len(session.corrections) >= 3
    upstream = WindowedUpstream()
    with memd_in_front(upstream.app, tmp_path, backend,
                       context_window=WINDOW) as (base, engine):
        ids, sessions = replay(session, base, upstream)
        assert len(sessions) == 1  # one conversation, continued call after call
        assert upstream.refused == 0  # every forwarded request fit the window
        assert len(upstream.requests) == len(session.calls)
        for at, sent in zip(session.calls, upstream.requests, strict=True):
            mine = session.messages[:at]
            got = sent["messages"]
            assert WindowedUpstream.tokens(sent) <= WINDOW
            assert orphans(got) == [], at
            assert got[0] == mine[0]  # the system prompt, verbatim
            # every user message, the corrections and the newest one among them, verbatim
            users = [m["content"] for m in mine if m["role"] == "user"]
            assert [user_text(m["content"]) for m in got if m["role"] == "user"] == users
            # the user's newest words whole; the newest tool result whole, or (a big one)
            # its admitted excerpt
            assert user_text(got[-1]["content"]) == mine[-1]["content"] if \
                mine[-1]["role"] == "user" else \
                whole_or_admitted(got[-1]["content"], mine[-1]["content"])
        last = [user_text(m["content"]) for m in upstream.requests[-1]["messages"]
                if m["role"] == "user"]
        assert all(c in last for c in session.corrections)
        with httpx.Client(base_url=base, timeout=60) as client:
            reports = [client.get(f"/v1/calls/{i}").json()["report"] for i in ids]
        engaged = [r["virtual"] for r in reports if "virtual" in r]
        assert engaged and engaged[-1]["zone"] in ("warning", "critical", "emergency")
        shown = [t for v in engaged for t in v["transitions"]]
        stored = engine.store.fidelity_transitions("local", sessions.pop())
        assert len(stored) == len(shown) > 0
        assert {t["to"] for t in shown} >= {"compact", "stub", "evicted"}
        # what degraded stayed degraded: no object went back up
        assert all(t.to_fidelity > t.from_fidelity for t in stored)



def test_without_virtualization_the_model_server_refuses_the_session(tmp_path: Path) -> None:
    """The same session with ``X-Memd-Virtualize: off`` (or a workspace set to off) goes
    upstream as the client sent it, byte for byte, and over the window."""
    session = agent_session(turns=2)
    at = session.calls[-1]
    raw = json.dumps({"model": MODEL, "messages": session.messages[:at],
                      "tools": session.tools, "max_tokens": RESERVE}).encode()
    upstream = WindowedUpstream()
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW,
                       virtualize_workspaces={"plain": "off"}) as (base, _), \
            httpx.Client(base_url=base, timeout=60) as client:
        for path, headers in (("/v1", {"X-Memd-Virtualize": "off"}), ("/w/plain/v1", {})):
            r = client.post(f"{path}/chat/completions", content=raw, headers={
                **headers, "content-type": "application/json"})
            assert r.status_code == 400 and "exceeds" in r.text
            report = client.get(f"/v1/calls/{r.headers['x-memd-call']}").json()["report"]
            assert "virtual" not in report
    assert upstream.refused == 2
    assert upstream.raw == [raw, raw]


def test_a_bad_virtualize_header_is_refused_saying_so(tmp_path: Path) -> None:
    upstream = WindowedUpstream()
    hi = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, _), \
            httpx.Client(base_url=base) as client:
        r = client.post("/v1/chat/completions", headers={"X-Memd-Virtualize": "maybe"},
                        json=hi)
        assert r.status_code == 400
        assert "X-Memd-Virtualize must be one of auto, on, off" in r.text
        r = client.post("/v1/chat/completions", headers={"X-Memd-Virtualize": "ON"}, json=hi)
        assert r.status_code == 200
        report = client.get(f"/v1/calls/{r.headers['x-memd-call']}").json()["report"]
        assert report["virtual"]["zone"] == "normal"
        assert report["virtual"]["transitions"] == []
    assert upstream.requests == [hi]  # the refused one never went upstream


def test_a_streamed_call_of_the_official_client_is_virtualized_too(tmp_path: Path) -> None:
    session = agent_session(turns=2)
    at = session.calls[-2]  # the last tool result is the newest message
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW) as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        stream = client.chat.completions.create(
            model=MODEL, messages=session.messages[:at],  # type: ignore[arg-type]
            tools=session.tools, max_tokens=RESERVE, stream=True)  # type: ignore[arg-type]
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    sent = upstream.requests[-1]
    assert WindowedUpstream.tokens(sent) <= WINDOW < WindowedUpstream.tokens(
        {**sent, "messages": session.messages[:at]})
    assert orphans(sent["messages"]) == []
    assert sent["messages"][-1] == session.messages[at - 1]
    assert text == f"ok: {session.messages[at - 1]['content']}"
