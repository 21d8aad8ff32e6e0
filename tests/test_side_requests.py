"""Side requests (memd.engine.conversation.side) and the headers that go upstream.

A client's title, summary, compaction or other call of its own beside the conversation is
forwarded exactly as sent, gets no memory block, creates no session and teaches memd
nothing; its call record says it was a side request and why. Every end-to-end header the
client sent goes upstream, but for hop-by-hop ones, memd's own and the credentials each
mode replaces."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from servers import FakeUpstream, postgres_url

import memd
from memd.config import load_settings
from memd.engine.conversation.side import RecentTurns, side_reason
from memd.engine.learning.extract import STYLE_TAG
from memd.engine.memory import Memd
from memd.errors import InvalidInput
from memd.server.app import create_app
from memd.types import Tier

STATED = "Remember that the staging host is staging.rocket.internal for all deploys."


@dataclass
class Proxy:
    client: TestClient
    engine: Memd
    upstream: FakeUpstream

    def chat(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        resp = self.client.post("/v1/chat/completions", json={"model": "gpt-4o", **body},
                                headers=headers)
        assert resp.status_code == 200, resp.text
        return resp

    def sessions(self) -> list[Any]:
        return self.engine.store.list_sessions("local")

    def memories(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.client.get("/v1/memories").json()["memories"]
        return found


def make_proxy(tmp_path: Path, backend: str, **overrides: Any) -> Iterator[Proxy]:
    upstream = FakeUpstream()
    settings = replace(load_settings(data_dir=tmp_path / "d"),
                       upstream_url="http://upstream/v1", embedder="fake", **overrides)
    if backend == "postgres":
        settings = replace(settings, db=postgres_url(), pg_partitions=(4, 4, 4))
    engine = memd.open(settings=settings)
    app = create_app(engine, settings, run_jobs=False,
                     upstream_transport=httpx.ASGITransport(app=upstream.app))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield Proxy(client, engine, upstream)
    engine.close()


@pytest.fixture
def proxy(backend: str, tmp_path: Path) -> Iterator[Proxy]:
    yield from make_proxy(tmp_path, backend)


TITLE = {"messages": [
    {"role": "system", "content": "You are a title generator. You output ONLY a thread "
                                  "title. Nothing else."},
    {"role": "user", "content": "Generate a title for this conversation:\n" + STATED}]}


@pytest.mark.parametrize("body", [
    pytest.param(TITLE, id="known-prompt"),
    pytest.param({"messages": [{"role": "user", "content": STATED}],
                  "response_format": {"type": "json_object"}}, id="json-response"),
    pytest.param({"messages": [{"role": "user", "content": STATED * 20}], "max_tokens": 20},
                 id="condensed"),
])
def test_a_side_request_goes_as_sent_with_no_session_and_teaches_nothing(
        proxy: Proxy, body: dict[str, Any]) -> None:
    proxy.engine.set_fact("local", "identity", "name", "Ada", importance=0.9)
    resp = proxy.chat(body)
    assert "x-memd-session" not in resp.headers
    assert resp.headers["x-memd-side"] == "true"
    sent = proxy.upstream.requests[-1]
    assert sent == {"model": "gpt-4o", **body}  # no memory block, nothing changed
    assert proxy.sessions() == []
    proxy.engine.jobs.flush()
    proxy.engine.jobs.run_due()
    assert proxy.memories() == []
    assert [f.key for f in proxy.engine.facts("local")] == ["name"]
    call = proxy.client.get(f"/v1/calls/{resp.headers['x-memd-call']}").json()
    assert call["session_id"] is None
    assert call["report"]["mode"] == "side" and call["report"]["reason"]


def test_a_side_request_is_forwarded_byte_for_byte(proxy: Proxy) -> None:
    raw = (b'{"model":"gpt-4o",  "messages":[{"role":"user","content":"caf\\u00e9"}],'
           b' "response_format": {"type": "json_object"}, "x_custom": 1.0}')
    resp = proxy.client.post("/v1/chat/completions", content=raw,
                             headers={"content-type": "application/json"})
    assert resp.status_code == 200 and resp.headers["x-memd-side"] == "true"
    assert proxy.upstream.raw[-1] == raw


def test_a_turn_memd_adds_nothing_to_is_forwarded_byte_for_byte(proxy: Proxy) -> None:
    """A conversation's turn goes upstream as the client's own bytes when memd has no
    memory to add (nothing stored yet); once it adds a block, the request is encoded
    again with the block in it."""
    raw = (b'{"model":"gpt-4o",  "messages":[{"role":"user","content":"Which port does '
           b'the staging host use? caf\\u00e9"}], "x_custom": 1.0}')
    resp = proxy.client.post("/v1/chat/completions", content=raw,
                             headers={"content-type": "application/json"})
    assert resp.status_code == 200 and "x-memd-session" in resp.headers
    assert proxy.upstream.raw[-1] == raw
    report = proxy.client.get(f"/v1/calls/{resp.headers['x-memd-call']}").json()["report"]
    assert report["mode"] == "transparent" and report["injected"] is None
    # a style rule applies to every request: the next one gets a block
    proxy.engine.add("Code style: small functions, type hints", "local",
                     tier=Tier.PROCEDURAL, provenance="instruction", tags=[STYLE_TAG])
    again = raw.replace(b"port", b"ports")
    resp = proxy.client.post("/v1/chat/completions", content=again,
                             headers={"content-type": "application/json"})
    assert resp.status_code == 200
    assert proxy.upstream.raw[-1] != again
    sent = proxy.upstream.requests[-1]
    assert "small functions" in sent["messages"][0]["content"]
    assert sent["x_custom"] == 1.0 and sent["model"] == "gpt-4o"


def test_text_completions_are_side_requests(proxy: Proxy) -> None:
    body = {"model": "gpt-4o", "prompt": "def add(a, b):\n    return", "max_tokens": 16,
            "suffix": "\n"}
    resp = proxy.client.post("/v1/completions", json=body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["text"] == " ok"
    assert resp.headers["x-memd-side"] == "true"
    assert proxy.upstream.requests[-1] == body
    assert proxy.sessions() == []
    call = proxy.client.get(f"/v1/calls/{resp.headers['x-memd-call']}").json()
    assert call["report"]["reason"] == "a text completion (/v1/completions)"
    assert call["metadata"]["usage"]["total_tokens"] == 6
    bad = proxy.client.post("/v1/completions", json={"prompt": "x", "stream": "yes"})
    assert bad.status_code == 400 and "stream" in bad.json()["error"]["message"]


def test_the_header_turns_memory_off_and_on(proxy: Proxy) -> None:
    # a style rule: it applies to every request, whatever it is about
    proxy.engine.add("Always answer in British English", "local", tier=Tier.PROCEDURAL,
                     provenance="instruction", tags=[STYLE_TAG])
    turn = {"messages": [{"role": "user", "content": "What should I call my cat?"}]}
    proxy.chat(turn, **{"X-Memd-Memory": "off"})
    assert proxy.upstream.requests[-1]["messages"] == turn["messages"]
    assert proxy.sessions() == []
    # "on" makes a call that looks like a side request a turn
    resp = proxy.chat({**turn, "response_format": {"type": "json_object"}},
                      **{"X-Memd-Memory": "on"})
    assert "x-memd-side" not in resp.headers
    assert "British English" in str(proxy.upstream.requests[-1]["messages"][-1]["content"])
    assert len(proxy.sessions()) == 1
    # a value other than on/off is refused, also for a call that pins its session
    before = len(proxy.upstream.requests)
    for headers in ({"X-Memd-Memory": "maybe"},
                    {"X-Memd-Memory": "maybe", "X-Memd-Session": "pinned-1"}):
        bad = proxy.client.post("/v1/chat/completions", json=turn, headers=headers)
        assert bad.status_code == 400 and "'on' or 'off'" in bad.json()["error"]["message"]
    assert len(proxy.upstream.requests) == before


def test_a_single_turn_quoting_the_conversation_under_another_prompt_is_a_side_request(
        tmp_path: Path) -> None:
    for p in make_proxy(tmp_path, "sqlite"):
        agent = {"role": "system", "content": "You are a coding agent."}
        headers = {"User-Agent": "some-agent/2.1"}
        p.chat({"messages": [agent, {"role": "user", "content": STATED}],
                "tools": [{"type": "function", "function": {"name": "read"}}]}, **headers)
        assert len(p.sessions()) == 1
        summary = {"messages": [
            {"role": "system", "content": "Name the topic of what the user wrote."},
            {"role": "user", "content": f"The user wrote:\n\n{STATED}\n\nThe topic is?"}]}
        resp = p.chat(summary, **headers)
        assert resp.headers.get("x-memd-side") == "true"
        assert len(p.sessions()) == 1
        # another client quoting the same words is not this client's side call
        resp = p.chat(summary, **{"User-Agent": "other-client/1.0"})
        assert "x-memd-side" not in resp.headers
        assert len(p.sessions()) == 2


def test_memd_calls_marks_side_requests(proxy: Proxy) -> None:
    from click.testing import CliRunner

    from memd.cli import main

    proxy.chat(TITLE)
    proxy.chat({"messages": [{"role": "user", "content": "hello there, a turn"}]})
    settings = proxy.engine.settings
    where = (["--db", settings.db] if settings.db.startswith("postgresql")
             else ["--data-dir", str(settings.data_dir)])
    out = CliRunner().invoke(main, ["calls", *where])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 2
    assert "side request (a client's side prompt (You are a title generator.))" in lines[1]
    assert "side request" not in lines[0]


def test_side_reason_signals() -> None:
    user = {"role": "user", "content": "Tell me about Rust lifetimes in detail please."}
    assert side_reason({"messages": [user]}, None) is None
    assert side_reason({"messages": [user], "max_tokens": 4000}, None) is None
    # a tiny answer with tools, or later in a conversation, is a turn
    assert side_reason({"messages": [user], "max_tokens": 16,
                        "tools": [{"type": "function"}]}, None) is None
    assert side_reason({"messages": [user, {"role": "assistant", "content": "x"}, user],
                        "max_tokens": 16}, None) is None
    # a short question with a small max_tokens is a one-line chat; a long text, condensed
    assert side_reason({"messages": [user], "max_tokens": 16}, None) is None
    long = {"role": "user", "content": user["content"] * 30}
    assert side_reason({"messages": [long], "max_tokens": 16}, None)
    assert side_reason({"messages": [long], "max_tokens": 400}, None) is None
    assert side_reason({"messages": [user]}, "OFF") == "X-Memd-Memory: off"
    assert side_reason({"messages": [long], "max_tokens": 1}, " on ") is None
    with pytest.raises(InvalidInput, match="'on' or 'off'"):
        side_reason({"messages": [user]}, "maybe")
    assert side_reason({"messages": [user], "response_format": {"type": "text"}}, None) is None
    compaction = {"role": "user", "content": "Provide a detailed prompt for continuing our "
                                             "conversation above. Focus on..."}
    assert side_reason({"messages": [user, {"role": "assistant", "content": "x"},
                                     compaction]}, None)


def test_qwen_codes_managed_memory_extraction_is_a_side_request() -> None:
    # as qwen-code 0.15 sends it: the conversation so far, then its extraction task as a
    # user message (under its usual system prompt, or the extraction subagent's)
    history = [{"role": "user", "content": "This is the Qwen Code. We are setting up the "
                                           "context for our chat."},
               {"role": "assistant", "content": "Got it. Thanks for the context!"},
               {"role": "user", "content": "What is the staging host again?"},
               {"role": "assistant", "content": "staging.rocket.internal"}]
    task = {"role": "user", "content": "Managed memory directory: `/home/u/.qwen/projects/"
                                       "x/memory`\n\nScan the recent conversation history "
                                       "in your context and update durable managed memory."}
    assert side_reason({"messages": [*history, task]}, None)
    subagent = {"role": "system", "content": "You are now acting as the managed memory "
                                             "extraction subagent for an AI coding assistant."}
    assert side_reason({"messages": [subagent, *history]}, None)
    assert side_reason({"messages": history}, None) is None


def test_recent_turns_quote_only_the_same_client_under_another_prompt() -> None:
    recent = RecentTurns()
    said = "the staging host is staging.rocket.internal"
    recent.note("u", "agent", "sys-a", said, now=100.0)
    wrapped = f"Summarize: {said}."
    assert recent.quoted("u", "agent", "sys-b", wrapped, now=110.0)
    assert not recent.quoted("u", "agent", "sys-a", wrapped, now=110.0)  # same prompt
    assert not recent.quoted("u", "other", "sys-b", wrapped, now=110.0)  # another client
    assert not recent.quoted("v", "agent", "sys-b", wrapped, now=110.0)  # another user
    assert not recent.quoted("u", "agent", "sys-b", said, now=110.0)  # the words alone
    assert not recent.quoted("u", "agent", "sys-b", wrapped, now=100.0 + 3600)  # too old
    recent.note("u", "agent", "sys-a", "too short", now=100.0)
    assert not recent.quoted("u", "agent", "sys-b", "Summarize: too short!", now=110.0)


# -- headers ---------------------------------------------------------------------------
def test_end_to_end_headers_go_upstream(proxy: Proxy) -> None:
    proxy.chat({"messages": [{"role": "user", "content": "hi"}]}, **{
        "User-Agent": "opencode/1.18.0", "x-session-affinity": "ses_123",
        "x-session-id": "abc", "x-stainless-lang": "js", "Authorization": "Bearer sk-client",
        "X-Memd-Session": "s1", "Connection": "keep-alive, x-hop", "x-hop": "1",
        "Cookie": "a=b"})
    sent = proxy.upstream.headers[-1]
    assert sent["user-agent"] == "opencode/1.18.0"
    assert sent["x-session-affinity"] == "ses_123"
    assert sent["x-session-id"] == "abc"
    assert sent["x-stainless-lang"] == "js"
    assert sent["authorization"] == "Bearer sk-client"  # local mode: the client's key
    for gone in ("x-memd-session", "x-hop", "cookie"):
        assert gone not in sent, gone


def test_memds_upstream_key_replaces_the_clients_credentials(tmp_path: Path) -> None:
    for p in make_proxy(tmp_path, "sqlite", upstream_api_key="sk-memd"):
        p.chat({"messages": [{"role": "user", "content": "hi"}]},
               **{"Authorization": "Bearer sk-client", "x-api-key": "sk-client",
                  "User-Agent": "aider/0.86"})
        sent = p.upstream.headers[-1]
        assert sent["authorization"] == "Bearer sk-memd"
        assert "x-api-key" not in sent
        assert sent["user-agent"] == "aider/0.86"
