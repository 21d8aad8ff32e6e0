"""memd's MCP server on the daemon (``/mcp``, streamable HTTP), driven by the official MCP
SDK's client over a real uvicorn port, beside the proxy and a fake upstream that records
what memd forwards: one memory serves both ways in, and a forget reaches both. Then the
guard: a page on another site, a foreign Host name, and in team mode a missing key are
refused before any tool runs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from mcp_client import call, over_http, refused
from ollama_upstream import FakeOllama
from pg import BACKENDS
from servers import FakeUpstream, memd_in_front, serve

import memd
from memd.config import load_settings
from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.server.mcp_tools import PAGE

FROM_EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
ACCEPT = {"Accept": "application/json, text/event-stream",
          "MCP-Protocol-Version": "2025-06-18"}


def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


ADD = rpc("tools/call", {"name": "add_memory", "arguments": {"text": "I code in Zig"}})


@dataclass
class Stack:
    base: str
    upstream: FakeUpstream
    engine: Memd
    ollama: FakeOllama

    def chat(self, text: str) -> str:
        """A proxied chat saying ``text``; returns the memory block memd added to it."""
        client = openai.OpenAI(base_url=f"{self.base}/v1", api_key="x", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        return self.block()

    def door_chats(self, text: str) -> list[str]:
        """``text`` said through the Anthropic Messages, the OpenAI Responses and Ollama's
        chat doors, a new conversation each; the memory block memd added to each."""
        blocks = []
        for path, body in (
                ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 100,
                                  "messages": [{"role": "user", "content": text}]}),
                ("/v1/responses", {"model": "gpt-5", "input": text}),
                ("/api/chat", {"model": "llama3.2:latest", "stream": False,
                               "messages": [{"role": "user", "content": text}]})):
            resp = httpx.post(self.base + path, json=body, timeout=30)
            assert resp.status_code == 200, resp.text
            sent = self.ollama if path == "/api/chat" else self.upstream
            blocks.append(self.block(sent.requests[-1]))
        return blocks

    def block(self, request: dict[str, Any] | None = None) -> str:
        """The memory block in ``request`` (default: what the upstream got last), whichever
        API it spoke (as JSON text: its newlines escaped)."""
        raw = json.dumps(request or self.upstream.requests[-1], ensure_ascii=False)
        opened, closed = (json.dumps(t, ensure_ascii=False)[1:-1]
                          for t in (USER_OPEN, USER_CLOSE))
        if opened not in raw:
            return ""
        return raw[raw.index(opened) + len(opened):raw.index(closed)]

    def settle(self) -> None:
        """Wait until the daemon's job worker has drained the queue."""
        deadline = time.monotonic() + 20
        while self.engine.store.pending_jobs():
            assert time.monotonic() < deadline, "jobs did not drain"
            time.sleep(0.05)


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    upstream, ollama = FakeUpstream(), FakeOllama()
    with serve(ollama.app) as ollama_url, memd_in_front(
            upstream.app, tmp_path / "d", getattr(request, "param", "sqlite"),
            upstream_ollama_url=ollama_url) as (base, engine):
        yield Stack(base, upstream, engine, ollama)


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_one_memory_serves_mcp_and_the_proxy_and_a_forget_reaches_both(
        stack: Stack) -> None:
    async def through_mcp() -> None:
        async with over_http(stack.base) as mcp:
            added = await call(mcp, "add_memory",
                               text="My favourite editor is Helix with a dark theme")
            assert added["action"] == "inserted"
            memory = added["memory"]
            # the agent wrote it on the user's behalf, and says so
            assert memory["provenance"] == "user_stated" and memory["user_id"] == "local"
            assert memory["metadata"] == {"source": "mcp", "written_by": "agent"}
            again = await call(mcp, "add_memory",
                               text="My favourite editor is Helix with a dark theme")
            assert again["action"] == "duplicate"  # deduplicated
            assert again["memory"]["id"] == memory["id"]
            hits = (await call(mcp, "search_memory", query="Helix editor theme"))["hits"]
            assert hits[0]["id"] == memory["id"]

            # MCP -> proxy: the next proxied chat's block holds it, on every door
            assert "Helix" in await anyio.to_thread.run_sync(
                stack.chat, "Which editor theme is my favourite?")
            for block in await anyio.to_thread.run_sync(
                    stack.door_chats, "Which editor theme is my favourite?"):
                assert "Helix" in block
            # proxy -> MCP: what a chat said is found by search_memory
            await anyio.to_thread.run_sync(
                stack.chat, "Remember that I deploy with Kubernetes on Fridays")
            await anyio.to_thread.run_sync(stack.settle)
            hits = (await call(mcp, "search_memory", query="Kubernetes deploy"))["hits"]
            assert any("Kubernetes" in h["text"] for h in hits)
            preview = await call(mcp, "context", query="Which editor theme do I use, Helix?")
            assert "Helix" in preview["block"] and preview["tokens"] > 0
            assert memory["id"] in {i["id"] for i in preview["items"]} or any(
                "Helix" in i["text"] for i in preview["items"])

            gone = await call(mcp, "forget_memory", id=memory["id"])
            assert gone["deleted"] == memory["id"]
            hits = (await call(mcp, "search_memory", query="Helix editor theme"))["hits"]
            assert all("Helix" not in h["text"] for h in hits)
            listed = (await call(mcp, "list_memories"))["memories"]
            assert memory["id"] not in {m["id"] for m in listed}
            preview = await call(mcp, "context", query="Which editor theme do I use, Helix?")
            assert "Helix" not in preview["block"]
            assert "no memory" in await refused(mcp, "forget_memory", id=memory["id"])
            # ... and from the proxy's blocks, on every door
            assert "Helix" not in await anyio.to_thread.run_sync(
                stack.chat, "Which editor theme is my favourite?")
            for block in await anyio.to_thread.run_sync(
                    stack.door_chats, "Which editor theme is my favourite?"):
                assert "Helix" not in block

    anyio.run(through_mcp)


def test_recall_facts_calls_and_resources(stack: Stack) -> None:
    stack.chat("My name is Priya and I like long walks")
    stack.settle()
    call_id = stack.engine.calls("local")[0]["id"]
    session_id = stack.engine.store.list_sessions("local")[0].id

    async def through_mcp() -> None:
        async with over_http(stack.base) as mcp:
            facts = (await call(mcp, "list_facts"))["facts"]
            assert {(f["key"], f["value"]) for f in facts} >= {("name", "Priya")}
            past = await call(mcp, "recall_conversation", query="long walks")
            assert any("long walks" in m["text"] for m in past["messages"])
            whole = await call(mcp, "recall_conversation", session_id=session_id)
            assert [m["role"] for m in whole["messages"]] == ["user", "assistant"]
            assert "not both or neither" in await refused(mcp, "recall_conversation")
            report = await call(mcp, "get_call", id=call_id)
            assert report["id"] == call_id and report["session_id"] == session_id
            assert "no call" in await refused(mcp, "get_call", id="nope")

            names = {t.uri_template for t in (await mcp.list_resource_templates())
                     .resource_templates}
            assert names == {"memory://facts/{workspace}", "memory://sessions/{session_id}"}
            read = await mcp.read_resource("memory://facts/_")
            assert "Priya" in read.contents[0].text  # type: ignore[union-attr]
            read = await mcp.read_resource(f"memory://sessions/{session_id}")
            assert "long walks" in read.contents[0].text  # type: ignore[union-attr]

    anyio.run(through_mcp)


def test_list_memories_pages_with_a_cursor_and_scopes_to_a_workspace(stack: Stack) -> None:
    for i in range(PAGE + 3):
        stack.engine.add(f"note number {i} about topic {i * 7}", "local")
    stack.engine.add("the alpha project builds with Bazel", "local", workspace="alpha")

    async def through_mcp() -> None:
        async with over_http(stack.base) as mcp:
            first = await call(mcp, "list_memories")
            assert len(first["memories"]) == PAGE and first["next_cursor"]
            second = await call(mcp, "list_memories", cursor=first["next_cursor"])
            assert len(second["memories"]) == 4 and second["next_cursor"] is None
            ids = [m["id"] for m in first["memories"] + second["memories"]]
            assert len(set(ids)) == PAGE + 4
            assert "cursor" in await refused(mcp, "list_memories", cursor="garbage!")
            added = await call(mcp, "add_memory", text="alpha ships on Tuesdays",
                               workspace="alpha")
            assert added["memory"]["workspace"] == "alpha"
            hits = (await call(mcp, "search_memory", query="Bazel alpha",
                               workspace="alpha"))["hits"]
            assert any("Bazel" in h["text"] for h in hits)
            # a bad argument is refused by the schema, before memd
            await refused(mcp, "search_memory", query="x", k=0)
            await refused(mcp, "add_memory", text="x", workspace="not a workspace!")

    anyio.run(through_mcp)


def test_secrets_never_become_memories(stack: Stack) -> None:
    async def through_mcp() -> None:
        async with over_http(stack.base) as mcp:
            added = await call(mcp, "add_memory",
                               text="my deploy key is ghp_abcdefghijklmnopqrstuvwxyz0123456789")
            assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in added["memory"]["text"]

    anyio.run(through_mcp)
    rows = stack.engine.list("local")
    assert rows and all("ghp_abcdef" not in m.text for m in rows)


# -- the guard ---------------------------------------------------------------------------
@pytest.fixture
def local(engine: Memd) -> Iterator[TestClient]:
    with TestClient(create_app(engine, run_jobs=False), base_url="http://127.0.0.1") as c:
        yield c


def test_a_cross_site_request_to_mcp_is_refused_and_writes_nothing(
        local: TestClient, engine: Memd) -> None:
    for headers in (FROM_EVIL, {"Origin": "https://evil.example"}, {"Origin": "null"}):
        resp = local.post("/mcp", json=ADD, headers={**ACCEPT, **headers})
        assert resp.status_code == 403, resp.text
        assert resp.json()["error"]["type"] == "cross_site_request"
    resp = local.post("/mcp", json=ADD, headers={**ACCEPT, "Host": "evil.example"})
    assert resp.status_code == 421  # DNS rebinding
    resp = local.post("/mcp", content=b"{}", headers={**ACCEPT, "Content-Type": "text/plain"})
    assert resp.status_code == 415  # a page's "simple request"
    assert engine.list("local") == []
    # the same request from a local client (no Origin, or memd's own) works
    resp = local.post("/mcp", json=ADD, headers={**ACCEPT, "Origin": "http://127.0.0.1"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"]["structuredContent"]["action"] == "inserted"
    assert [m.text for m in engine.list("local")] == ["I code in Zig"]


def test_mcp_is_not_in_the_openapi_schema(local: TestClient) -> None:
    assert "/mcp" not in local.get("/openapi.json").json()["paths"]


def test_team_mode_needs_the_memd_key_and_acts_as_its_user(tmp_path: Path) -> None:
    settings = replace(load_settings(data_dir=tmp_path / "d"), auth=True)
    engine = memd.open(settings=settings)
    for user in ("alice", "bob"):
        engine.accounts.add_user(user)
    keys = {user: engine.accounts.create_key(user).secret for user in ("alice", "bob")}
    try:
        with serve(create_app(engine, settings, run_jobs=False)) as base:
            resp = httpx.post(f"{base}/mcp", json=ADD, headers=ACCEPT)
            assert resp.status_code == 401
            resp = httpx.post(f"{base}/mcp", json=ADD,
                              headers={**ACCEPT, "Authorization": "Bearer memd_wrong"})
            assert resp.status_code == 401

            async def as_alice() -> None:
                bearer = f"Bearer {keys['alice']}"
                async with over_http(base, Authorization=bearer) as mcp:
                    added = await call(mcp, "add_memory", text="alice likes Rust")
                    assert added["memory"]["user_id"] == "alice"
                async with over_http(base, Authorization=bearer,
                                     **{"X-Memd-User": "bob"}) as mcp:
                    assert "cannot act as" in await refused(mcp, "list_memories")
                async with over_http(base, Authorization=f"Bearer {keys['bob']}") as mcp:
                    assert (await call(mcp, "list_memories"))["memories"] == []

            anyio.run(as_alice)
        assert [m.text for m in engine.list("alice")] == ["alice likes Rust"]
    finally:
        engine.close()


LAZY = """
import json, sys
from fastapi.testclient import TestClient
import memd
from memd.server.app import create_app

loaded = lambda: any(m.split(".")[0] in ("mcp", "mcp_types") for m in sys.modules)
engine = memd.open(sys.argv[1])
with TestClient(create_app(engine, run_jobs=False), base_url="http://127.0.0.1") as c:
    before = (c.get("/health").status_code, loaded())
    body = json.loads(sys.argv[2])
    resp = c.post("/mcp", json=body, headers=json.loads(sys.argv[3]))
    print(json.dumps([before, [resp.status_code, loaded()], resp.json()]))
"""


def test_the_daemon_loads_the_mcp_sdk_on_the_first_mcp_request(tmp_path: Path) -> None:
    """The SDK costs a process about 30 MB: a daemon nobody calls over MCP does not
    load it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LAZY, str(tmp_path / "d"), json.dumps(ADD),
                           json.dumps(ACCEPT)], capture_output=True, text=True, timeout=120,
                          check=True)
    before, after, answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [200, False]
    assert after == [200, True]
    assert answer["result"]["structuredContent"]["action"] == "inserted"
