"""Writes that wait for the answer (memd.server.later): an answer, whole or streamed,
reaches the client before its reply is stored, and what a later request reads waits for
that write."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers import FakeUpstream, open_memd, serve

from memd.server import proxy
from memd.server.app import create_app
from memd.server.later import Later, is_door


def test_settled_waits_for_the_writes_under_way_of_the_user_asked() -> None:
    async def run() -> list[str]:
        later, seen = Later(), []
        mine, theirs = later.hold("ann"), later.hold("bob")

        async def wait(user: str | None, name: str) -> None:
            await later.settled(user)
            seen.append(name)

        tasks = [asyncio.ensure_future(wait("ann", "ann")),
                 asyncio.ensure_future(wait(None, "all")),
                 asyncio.ensure_future(wait("cy", "cy"))]
        await asyncio.sleep(0.01)
        assert seen == ["cy"] and not later.idle  # nothing of cy's under way
        later.release(mine)
        await asyncio.sleep(0.01)
        assert seen == ["cy", "ann"]
        newer = later.hold("ann")  # started after "all" began to wait: not awaited
        later.release(theirs)
        await asyncio.gather(*tasks)
        later.release(newer)
        await asyncio.sleep(0)
        assert later.idle
        return seen

    assert asyncio.run(run()) == ["cy", "ann", "all"]


@pytest.mark.parametrize(("method", "path", "door"), [
    ("POST", "/v1/chat/completions", True), ("POST", "/w/proj/v1/messages", True),
    ("POST", "/api/chat", True), ("GET", "/v1/chat/completions", False),
    ("POST", "/v1/sessions/s1/messages", False), ("GET", "/v1/calls", False),
])
def test_only_the_chat_doors_wait_for_their_own_user_alone(method: str, path: str,
                                                           door: bool) -> None:
    assert is_door(method, path) is door


@pytest.mark.parametrize("stream", [False, True])
def test_the_answer_comes_before_its_reply_is_stored_and_reads_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool,
) -> None:
    """Through the daemon, with the reply's write held at a gate: the client has its
    answer (a stream to its end), the reply is not stored yet, and a read of the session
    (another route) waits until it is."""
    gate = threading.Event()
    finish = proxy.finish_chat

    def held(*args: Any, **kwargs: Any) -> None:
        assert gate.wait(30)
        finish(*args, **kwargs)

    monkeypatch.setattr(proxy, "finish_chat", held)
    upstream = FakeUpstream()
    with serve(upstream.app) as up:
        engine = open_memd(tmp_path / "d", upstream_url=f"{up}/v1")
        try:
            with serve(create_app(engine, engine.settings)) as base:
                resp = httpx.post(f"{base}/v1/chat/completions", timeout=30, json={
                    "model": "m", "stream": stream,
                    "messages": [{"role": "user", "content": "Hi there"}]})
                assert resp.status_code == 200
                if stream:  # every chunk, the end of the stream included
                    assert resp.text.endswith("data: [DONE]\n\n")
                else:
                    assert resp.json()["choices"][0]["message"]["content"] == "ok: Hi there"
                session = resp.headers["x-memd-session"]
                assert [m.role for m in engine.messages(session, "local")] == ["user"]
                read: list[httpx.Response] = []
                reader = threading.Thread(target=lambda: read.append(httpx.get(
                    f"{base}/v1/sessions/{session}/messages", timeout=30)))
                reader.start()
                reader.join(0.3)
                assert read == []  # the read waits for the write under way
                gate.set()
                reader.join(30)
                stored = read[0].json()["messages"]
                assert [(m["role"], m["content"]) for m in stored] == [
                    ("user", "Hi there"), ("assistant", "ok: Hi there")]
        finally:
            gate.set()
            engine.close()
