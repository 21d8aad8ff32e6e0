"""Four real agent CLIs (opencode, qwen-code, cline, continue), each run twice headless
through a real ``memd serve`` on ONE store, against a scripted tool-calling model.

Run 1 of each client states a fact and makes a tool call; run 2, a new process and so a
new conversation, asks for the fact back. Everything happens once (the module fixture,
about half a minute); each test then checks one promise of the proxy on what was recorded
on both sides of memd: what each client sent, and what memd forwarded to the model.

The npm packages are installed by the module fixture (``agents.install``), into a cache
outside the repository, the first time it runs. ``MEMD_AGENTS_CORPUS=tests/fixtures/agents``
also writes the traffic as the corpus other tests and benchmarks read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents.clients import CLIENTS, run
from agents.install import ensure_installed
from agents.traffic import Exchange, RecordingProxy, ToolLoop, is_side_request, write_corpus
from servers import free_port, serve, wait_healthy
from test_agent_proxy import without_memory

from tests.agent_traffic import ScriptedUpstream

pytestmark = pytest.mark.slow

HOST = "staging.rocket.internal"
PROMPTS = (f"Remember: the staging host is {HOST}. Read notes.txt and tell me what it says.",
           "What is the staging host again?")
NAMES = [c.name for c in CLIENTS]


@dataclass
class Recorded:
    """Both sides of memd for the whole scenario, and memd's view of it afterwards."""

    root: Path
    sent: list[Exchange]  # what the clients sent to memd, in arrival order
    forwarded: list[dict[str, Any]]  # what memd sent upstream, bodies in arrival order
    runs: dict[tuple[str, int], subprocess.CompletedProcess[str]]
    memories: list[dict[str, Any]]
    facts: list[dict[str, Any]]
    sessions: dict[str, int]  # session id -> GET /v1/sessions/{id} status

    def chats(self, client: str, run: int | None = None,
              side: bool | None = None) -> list[Exchange]:
        return [x for x in self.sent if x.client == client and x.path.endswith(
            "/chat/completions") and (run is None or x.run == run)
            and (side is None or x.side == side)]


def _memd_env(data: Path, upstream: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMD_")}
    return {**env, "MEMD_DATA_DIR": str(data), "MEMD_EMBEDDER": "fake",
            "MEMD_UPSTREAM_URL": upstream, "XDG_CONFIG_HOME": str(data / "xdg-config"),
            "XDG_STATE_HOME": str(data / "xdg-state")}


def _settle(base: str) -> None:
    """Wait until memd's background jobs (embeddings, extraction) are done, so run 2
    recalls what run 1 left, as it would minutes later."""
    deadline = time.monotonic() + 60
    while due := [j for j in httpx.get(f"{base}/v1/jobs").json()["data"]
                  if (j["run_after"] or 0) <= time.time()]:
        assert time.monotonic() < deadline, f"memd's jobs did not finish: {due}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    bin = ensure_installed()
    root = tmp_path_factory.mktemp("agents")
    loop = ToolLoop(CLIENTS[0], "")
    upstream = ScriptedUpstream(model="scripted-model", responder=loop)
    port = free_port()
    runs: dict[tuple[str, int], subprocess.CompletedProcess[str]] = {}
    with serve(upstream.app) as up:
        log = (root / "serve.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "memd.cli", "serve", "--port", str(port)],
                                env=_memd_env(root / "memd", f"{up}/v1"), stdout=log,
                                stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(port, proc)
            proxy = RecordingProxy(base)
            with serve(proxy.app) as front:
                for client in CLIENTS:
                    work = root / client.name / "work"
                    work.mkdir(parents=True)
                    (work / "notes.txt").write_text("The build uses make; tests run with "
                                                    "pytest.\n")
                    for n, prompt in enumerate(PROMPTS, 1):
                        loop.client, loop.workfile = client, str(work / "notes.txt")
                        loop.spaced = n == 1  # both spellings of the arguments, per client
                        proxy.client, proxy.run = client.name, n
                        runs[client.name, n] = run(client, bin, root / client.name / "home",
                                                   work, f"{front}/v1", prompt)
                        _settle(base)
            memories = httpx.get(f"{base}/v1/memories", params={
                "limit": 1000, "include_inactive": True}).json()["memories"]
            facts = httpx.get(f"{base}/v1/facts",
                              params={"include_history": True}).json()["facts"]
            ids = {x.response_headers.get("x-memd-session") for x in proxy.exchanges} - {None}
            sessions = {i: httpx.get(f"{base}/v1/sessions/{i}").status_code
                        for i in sorted(i for i in ids if i)}
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    if os.environ.get("MEMD_AGENTS_CORPUS"):
        write_corpus(Path(os.environ["MEMD_AGENTS_CORPUS"]), proxy.exchanges, root)
    yield Recorded(root, proxy.exchanges, upstream.requests, runs, memories, facts, sessions)


def test_every_client_run_completes_its_tool_loop(recorded: Recorded) -> None:
    for client in CLIENTS:
        for n in (1, 2):
            done = recorded.runs[client.name, n]
            assert done.returncode == 0, (client.name, n, done.stdout[-2000:],
                                          done.stderr[-2000:])
            main = recorded.chats(client.name, n, side=False)
            # the tool call, then the answer after its result
            assert len(main) >= 2, (client.name, n, [x.body for x in main])
            assert any(m.get("role") == "tool" for m in main[-1].body["messages"])


@pytest.mark.parametrize("name", NAMES)
def test_memd_forwards_what_the_client_sent_plus_the_memory_block(
        recorded: Recorded, name: str) -> None:
    """Each request a client sent reaches the model as sent, once the block memd put in
    the newest user message is taken out; side requests get no block at all."""
    pending = list(recorded.forwarded)
    for seen in recorded.chats(name):
        matches = [i for i, f in enumerate(pending) if without_memory(f)[0] == seen.body]
        assert matches, f"{name} run {seen.run}: no forwarded request equals what was sent"
        forwarded = pending.pop(matches[0])
        if seen.side:
            assert forwarded == seen.body, f"{name}: a side request got a memory block"


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9][a-z0-9.\-]*[a-z0-9]|[a-z0-9]", text.lower())
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


def _texts(value: Any) -> Iterator[str]:
    """Every string inside a message's content (a string, or parts with text)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for part in value:
            yield from _texts(part.get("text") if isinstance(part, dict) else part)


def _client_text(recorded: Recorded) -> set[tuple[str, ...]]:
    """Three-word runs of everything the clients sent that the user did not type: system
    prompts, templates, tool results, the model's replies."""
    found: set[tuple[str, ...]] = set()
    for seen in recorded.sent:
        for m in (seen.body or {}).get("messages", []) if isinstance(seen.body, dict) else []:
            for text in _texts(m.get("content")):
                for typed in PROMPTS:
                    text = text.replace(typed, " ")
                found |= _shingles(text)
    return found - set().union(*map(_shingles, PROMPTS))


def test_every_memory_and_fact_comes_from_what_the_user_typed(recorded: Recorded) -> None:
    """A memory or fact is grounded when it repeats three words in a row of a message the
    user typed and no three words in a row of the clients' own text."""
    typed = set().union(*map(_shingles, PROMPTS))
    client = _client_text(recorded)
    assert recorded.memories, "memd learnt nothing from the four sessions"
    ungrounded = [m["text"] for m in recorded.memories
                  if not _shingles(m["text"]) & typed or _shingles(m["text"]) & client]
    ungrounded += [f"{f['category']}/{f['key']} = {f['value']}" for f in recorded.facts
                   if not any(str(f["value"]).lower() in p.lower() for p in PROMPTS)]
    assert not ungrounded, f"memories/facts not from user-typed text: {ungrounded}"


def _session(seen: Exchange) -> str | None:
    return seen.response_headers.get("x-memd-session")


@pytest.mark.parametrize("name", NAMES)
def test_one_session_per_conversation(recorded: Recorded, name: str) -> None:
    per_run = [{_session(x) for x in recorded.chats(name, n, side=False)} for n in (1, 2)]
    assert [len(s) for s in per_run] == [1, 1], f"{name}: sessions per run {per_run}"
    assert per_run[0] != per_run[1], f"{name}: two conversations share a session"
    for ids in per_run:
        assert all(i is not None and recorded.sessions.get(i) == 200 for i in ids), ids


@pytest.mark.parametrize("name", NAMES)
def test_side_requests_create_no_session(recorded: Recorded, name: str) -> None:
    main = {_session(x) for x in recorded.chats(name, side=False)}
    for seen in recorded.chats(name, side=True):
        made = _session(seen)
        assert made is None or made in main or recorded.sessions.get(made) == 404, \
            f"{name} run {seen.run}: a side request made session {made}"


@pytest.mark.parametrize("name", NAMES)
def test_run_two_recalls_the_staging_host_of_run_one(recorded: Recorded, name: str) -> None:
    asked = [x.body for x in recorded.chats(name, 2, side=False)]
    blocks = [without_memory(f)[1] for f in recorded.forwarded
              if without_memory(f)[0] in asked]
    assert blocks and all(b and HOST in b for b in blocks), f"{name}: blocks {blocks}"


def test_side_requests_are_told_apart() -> None:
    title = {"messages": [{"role": "system", "content": "You are a title generator."},
                          {"role": "user", "content": "Generate a title"}], "max_tokens": 32000}
    assert is_side_request(title)
    assert not is_side_request({**title, "tools": [{"type": "function",
                                                    "function": {"name": "read"}}]})




def test_the_corpus_holds_each_client_without_credentials() -> None:
    """tests/fixtures/agents: every client's two runs, side requests marked, and no API
    key or temporary path in it."""
    folder = Path(__file__).parent / "fixtures" / "agents"
    for name in NAMES:
        text = (folder / f"{name}.jsonl").read_text()
        records = [json.loads(line) for line in text.splitlines()]
        assert {r["run"] for r in records} == {1, 2}
        assert all(r["side"] == is_side_request(r["body"]) for r in records)
        assert not any("authorization" in r["headers"] for r in records)
        assert "sk-agent-test" not in text
        assert "pytest-of-" not in text and "/home/dev/project" in text
    assert any(json.loads(line)["side"] for line in
               (folder / "opencode.jsonl").read_text().splitlines())  # its title request
