"""``memd mcp`` as MCP clients launch it: a subprocess talking MCP on stdin and stdout,
driven by the official MCP SDK's client. Without a daemon it opens the store itself; with
a daemon serving the data dir it relays to the daemon's ``/mcp``, so a memory it adds or
forgets shows in the daemon's proxied chats at once."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from mcp_client import MEMD_MCP, call, over_stdio
from servers import FakeUpstream, open_memd, serve

import memd
from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.server.discovery import store_place, write_daemon_file

pytestmark = pytest.mark.slow
ROOT = str(Path(__file__).resolve().parent.parent)


def test_without_a_daemon_it_opens_the_store_itself(tmp_path: Path) -> None:
    data = tmp_path / "d"

    async def session() -> list[str]:
        async with over_stdio(data) as mcp:
            tools = [t.name for t in (await mcp.list_tools()).tools]
            added = await call(mcp, "add_memory", text="My cat is called Miso")
            assert added["action"] == "inserted"
            hits = (await call(mcp, "search_memory", query="cat called Miso"))["hits"]
            assert [h["id"] for h in hits][:1] == [added["memory"]["id"]]
        return tools

    tools = anyio.run(session)
    assert tools == ["search_memory", "add_memory", "list_memories", "forget_memory",
                     "list_facts", "recall_conversation", "context", "get_call"]
    with memd.open(data) as engine:
        (stored,) = engine.list("local")
    assert stored.text == "My cat is called Miso"
    assert stored.metadata == {"source": "mcp", "written_by": "agent"}


def test_user_option_acts_as_that_user(tmp_path: Path) -> None:
    data = tmp_path / "d"

    async def session() -> None:
        async with over_stdio(data, "--user", "ana") as mcp:
            await call(mcp, "add_memory", text="ana prefers Vim")

    anyio.run(session)
    with memd.open(data) as engine:
        assert [m.text for m in engine.list("ana")] == ["ana prefers Vim"]
        assert engine.list("local") == []


class Daemon:
    """memd on a real port in front of a fake upstream, recorded in ``daemon.json`` of
    its data dir as ``memd serve`` records itself; ``paths`` lists every request path."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.paths: list[str] = []
        self.upstream = FakeUpstream()

    def chat(self, base: str, text: str) -> str:
        """A proxied chat saying ``text``; the memory block memd added to it."""
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        sent = self.upstream.requests[-1]["messages"][-1]["content"]
        return sent[len(USER_OPEN):sent.index(USER_CLOSE)] if USER_OPEN in sent else ""


@pytest.fixture
def daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Daemon, str, Memd]]:
    """The daemon; with ``indirect`` True, in team mode (``auth``)."""
    found = Daemon(tmp_path / "d")
    with serve(found.upstream.app) as up:
        engine = open_memd(found.data, "sqlite", upstream_url=f"{up}/v1", job_interval=0.05,
                           auth=getattr(request, "param", False))
        app = create_app(engine, engine.settings)

        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                found.paths.append(scope["path"])
            await app(scope, receive, send)

        try:
            with serve(recorded) as base:
                port = int(base.rsplit(":", 1)[1])
                write_daemon_file(found.data, "127.0.0.1", port, store_place(engine.settings))
                yield found, base, engine
        finally:
            engine.close()


def test_with_a_daemon_it_relays_and_the_daemon_sees_at_once(
        daemon: tuple[Daemon, str, Memd]) -> None:
    found, base, engine = daemon

    async def session() -> None:
        async with over_stdio(found.data) as mcp:
            added = await call(mcp, "add_memory", text="I always review PRs in Gerrit")
            memory_id = added["memory"]["id"]
            block = await anyio.to_thread.run_sync(
                found.chat, base, "Where do I review PRs, Gerrit?")
            assert "Gerrit" in block
            await call(mcp, "forget_memory", id=memory_id)
            # the daemon's own block cache learns of the forget
            block = await anyio.to_thread.run_sync(
                found.chat, base, "Where do I review PRs, Gerrit?")
            assert "Gerrit" not in block

    anyio.run(session)
    assert found.paths.count("/mcp") >= 3  # relayed, not opened beside the daemon
    assert engine.list("local") == []


@pytest.mark.parametrize("daemon", [True], indirect=True)
def test_relaying_to_a_team_daemon_takes_the_key_in_memd_api_key(
        daemon: tuple[Daemon, str, Memd], monkeypatch: pytest.MonkeyPatch) -> None:
    found, _, engine = daemon
    engine.accounts.add_user("alice")
    key = engine.accounts.create_key("alice").secret
    env = {**os.environ, "MEMD_DATA_DIR": str(found.data),
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(MEMD_MCP, env=env, input="", capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert "requires an API key" in done.stderr and "MEMD_API_KEY" in done.stderr

    monkeypatch.setenv("MEMD_API_KEY", key)

    async def session() -> None:
        async with over_stdio(found.data) as mcp:
            added = await call(mcp, "add_memory", text="alice deploys on Mondays")
            assert added["memory"]["user_id"] == "alice"

    anyio.run(session)
    assert [m.text for m in engine.list("alice")] == ["alice deploys on Mondays"]
    assert "/mcp" in found.paths
