"""The official ``anthropic`` and ``openai`` Python clients through memd's Anthropic
Messages and OpenAI Responses doors, streaming and not, with tool use: what a client
gets through memd is what it gets from the same scripted upstream called directly, event
for event and byte for byte, while memd adds its block to what goes up; and the same
under a workspace's base URL (``/w/{workspace}``).

Two instances of each scripted upstream answer alike: one is called directly, the other
stands behind memd, so each sees the same sequence of requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic_upstream import SIGNATURE, FakeAnthropic
from responses_upstream import ENCRYPTED, FakeResponses
from servers import FakeUpstream, memd_in_front, serve
from starlette.routing import Route

from memd.engine.block.inject import USER_OPEN
from memd.engine.memory import Memd

HOST = "staging.rocket.internal"
TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
FUNCTIONS = [{"type": "function", "name": "read_file", "description": "Read a file",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
THINKING = {"type": "enabled", "budget_tokens": 512}
ASK = f"Read the readme, then deploy to the staging host {HOST}"


class SteadyAnthropic(FakeAnthropic):
    """:class:`FakeAnthropic` with a usage that does not depend on the request's size,
    so a request with memd's block is answered as the same request without it."""

    def _usage(self, raw: bytes, body: dict[str, Any]) -> dict[str, int]:
        return {"input_tokens": 120, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 100}


@dataclass
class Doors:
    base: str  # memd
    direct_anthropic: str
    direct_openai: str
    behind: SteadyAnthropic  # the upstreams behind memd
    behind_responses: FakeResponses
    engine: Memd


@pytest.fixture
def doors(tmp_path: Path) -> Iterator[Doors]:
    direct, behind = SteadyAnthropic(), SteadyAnthropic()
    direct_responses, behind_responses = FakeResponses(), FakeResponses()
    direct_chat, behind_chat = FakeUpstream(), FakeUpstream()
    for chat, responses in ((direct_chat, direct_responses), (behind_chat, behind_responses)):
        chat.app.router.routes.insert(0, Route("/v1/responses", responses.handle,
                                               methods=["POST"]))
    with serve(direct.app) as up_direct, serve(behind.app) as up_behind, \
            serve(direct_chat.app) as up_openai, memd_in_front(
                behind_chat.app, tmp_path / "d", upstream_anthropic_url=up_behind
            ) as (base, engine):
        engine.add(f"the staging host is {HOST}", "local")
        yield Doors(base, up_direct, up_openai, behind, behind_responses, engine)


def claude(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0)


def gpt(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="sk-test", max_retries=0)


def has_block(items: list[dict[str, Any]]) -> bool:
    """Whether memd's block is in a forwarded conversation (a text part, or the start
    of a string content)."""
    texts: list[str] = []
    for item in items:
        content = item.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        texts += [str(p.get("text", "")) for p in parts if isinstance(p, dict)]
    return any(t.startswith(USER_OPEN) for t in texts)


def anthropic_loop(client: anthropic.Anthropic, *, stream: bool) -> list[Any]:
    """A tool loop with the SDK: each step's events (streamed) or message, as dicts."""
    messages: list[Any] = [{"role": "user", "content": ASK}]
    seen: list[Any] = []
    for _ in range(2):
        kw: dict[str, Any] = {"model": "claude-sonnet-5", "max_tokens": 1024,
                              "tools": TOOLS, "thinking": THINKING, "messages": messages}
        if stream:
            with client.messages.stream(**kw) as s:
                seen += [e.model_dump() for e in s]
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kw)
            seen.append(reply.model_dump())
        messages = [*messages, {"role": "assistant", "content": [
            b.model_dump(exclude_none=True) for b in reply.content]}]
        use = reply.content[-1]
        if reply.stop_reason != "tool_use" or not isinstance(use, anthropic.types.ToolUseBlock):
            break
        messages.append({"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": use.id, "content": "make; pytest"}]})
    return seen


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_client_gets_what_the_upstream_sends(doors: Doors, stream: bool) -> None:
    direct = anthropic_loop(claude(doors.direct_anthropic), stream=stream)
    through = anthropic_loop(claude(doors.base), stream=stream)
    assert through == direct
    kinds = [e["type"] for e in through]
    if stream:  # every kind of event a tool step with thinking streams, in order
        deltas = [e["delta"]["type"] for e in through if e["type"] == "content_block_delta"]
        assert kinds[:3] == ["message_start", "content_block_start", "content_block_delta"]
        assert {"thinking_delta", "signature_delta", "input_json_delta", "text_delta"} <= set(
            deltas)
        assert kinds.count("message_stop") == 2 and kinds[-1] == "message_stop"
    else:
        assert [b["type"] for b in through[0]["content"]] == ["thinking", "tool_use"]
        assert through[0]["content"][0]["signature"] == SIGNATURE
    # memd did add its block to what went up, both steps
    assert [has_block(r["messages"]) for r in doors.behind.requests] == [True, True]


def test_anthropic_stream_bytes_are_relayed_unchanged(doors: Doors) -> None:
    body = {"model": "claude-sonnet-5", "max_tokens": 100, "stream": True, "tools": TOOLS,
            "thinking": THINKING, "messages": [{"role": "user", "content": ASK}]}
    got = [httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "k"}).content
           for url in (doors.direct_anthropic, doors.base)]
    assert got[1] == got[0] and b"signature_delta" in got[0]


def responses_loop(client: openai.OpenAI, *, stream: bool) -> list[Any]:
    """A Codex-like tool loop with the SDK's ``responses``: events or responses, as dicts."""
    items: list[Any] = [{"role": "user", "content": ASK}]
    seen: list[Any] = []
    for _ in range(2):
        kw: dict[str, Any] = {"model": "gpt-5-codex", "input": items, "tools": FUNCTIONS,
                              "store": False, "include": ["reasoning.encrypted_content"]}
        if stream:
            events = [e.model_dump() for e in client.responses.create(stream=True, **kw)]
            seen += events
            output = events[-1]["response"]["output"]
        else:
            reply = client.responses.create(**kw)
            seen.append(reply.model_dump())
            output = seen[-1]["output"]
        items = [*items, *output]
        if output[-1]["type"] != "function_call":
            break
        items.append({"type": "function_call_output", "call_id": output[-1]["call_id"],
                      "output": "make; pytest"})
    return seen


@pytest.mark.parametrize("stream", [True, False])
def test_openai_responses_client_gets_what_the_upstream_sends(doors: Doors,
                                                              stream: bool) -> None:
    direct = responses_loop(gpt(f"{doors.direct_openai}/v1"), stream=stream)
    through = responses_loop(gpt(f"{doors.base}/v1"), stream=stream)
    assert through == direct
    if stream:
        kinds = [e["type"] for e in through]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in kinds
        assert "response.output_text.delta" in kinds
        numbers = [e["sequence_number"] for e in through]
        firsts = [i for i, k in enumerate(kinds) if k == "response.created"]
        assert numbers[:firsts[1]] == list(range(1, firsts[1] + 1))  # each response's own
    reasoning = [o for o in (through[-1]["response"]["output"] if stream
                             else through[-1]["output"]) if o["type"] == "reasoning"]
    assert reasoning[0]["encrypted_content"] == ENCRYPTED
    assert [has_block(r["input"]) for r in doors.behind_responses.requests] == [True, True]


def test_clients_under_a_workspace_base_url(doors: Doors) -> None:
    reply = claude(f"{doors.base}/w/rocket").messages.create(
        model="claude-sonnet-5", max_tokens=100,
        messages=[{"role": "user", "content": "Remember: the rocket deploy runs at noon."}])
    assert reply.content[0].type == "text"
    with gpt(f"{doors.base}/w/rocket/v1").responses.stream(
            model="gpt-5-codex", input="When does the rocket deploy run?") as s:
        answer = s.get_final_response()
    assert answer.output_text.startswith("ok: ")
    # both calls are the workspace's, listed under its base URL and not outside it
    inside = httpx.get(f"{doors.base}/w/rocket/v1/calls").json()["data"]
    assert len(inside) == 2 and {c["workspace"] for c in inside} == {"rocket"}
    assert httpx.get(f"{doors.base}/w/other/v1/calls").json()["data"] == []
    sessions = doors.engine.store.list_sessions("local")
    assert len(sessions) == 2 and {s.workspace for s in sessions} == {"rocket"}
