"""Claude Code and Codex, installed from npm and run headless, through memd's Anthropic
Messages and OpenAI Responses doors against scripted models (:mod:`agents.doors`), one
after another on one store:

1. Claude Code: "Remember: the staging host is …", and a tool step reading notes.txt;
2. Codex: "Remember: the deploy branch is …", the same tool step;
3. Codex asks for the staging host, 4. Claude Code for the deploy branch.

What the clients sent is recorded in front of memd and what memd forwarded behind it.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import pytest
from agents.clients import run
from agents.doors import CLAUDE, CODEX, Models
from agents.install import ensure_installed
from agents.traffic import FINAL_ANSWER, Exchange, RecordingProxy
from servers import free_port, serve, wait_healthy
from test_real_agents import _memd_env, _settle

import memd
from memd.config import load_settings
from memd.engine.block.inject import USER_CLOSE, USER_OPEN

HOST = "staging.rocket.internal"
BRANCH = "release-candidate-7"
RUNS = ((CLAUDE, f"Remember: the staging host is {HOST}. Read notes.txt and tell me "
                 "what it says."),
        (CODEX, f"Remember: the deploy branch is {BRANCH}. Read notes.txt and tell me "
                "what it says."),
        (CODEX, "What is the staging host again?"),
        (CLAUDE, "What is the deploy branch again?"))


@dataclass
class Recorded:
    runs: list[subprocess.CompletedProcess[str]]
    exchanges: list[Exchange]
    models: Models
    sessions: dict[str, list[dict[str, Any]]]  # session id -> its stored messages


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    bin = ensure_installed()
    root = tmp_path_factory.mktemp("doors")
    models = Models()
    port = free_port()
    runs = []
    with serve(models.app) as up:
        env = {**_memd_env(root / "memd", f"{up}/v1"), "MEMD_UPSTREAM_ANTHROPIC_URL": up}
        log = (root / "serve.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "memd.cli", "serve", "--port",
                                 str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(port, proc)
            proxy = RecordingProxy(base)
            with serve(proxy.app) as front:
                for n, (client, prompt) in enumerate(RUNS, 1):
                    work = root / f"run{n}"
                    work.mkdir()
                    (work / "notes.txt").write_text("The build uses make; tests run with "
                                                    "pytest.\n")
                    models.point_at(str(work / "notes.txt"))
                    proxy.client, proxy.run = client.name, n
                    runs.append(run(client, bin, root / f"home{n}", work, front, prompt))
                    _settle(base)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    settings = replace(load_settings(data_dir=root / "memd"), embedder="fake")
    with memd.open(settings=settings) as engine:
        sessions = {s.id: [asdict(m) for m in engine.messages(s.id, "local")]
                    for s in engine.store.list_sessions("local")}
    yield Recorded(runs, proxy.exchanges, models, sessions)


def chats(recorded: Recorded, path: str) -> list[Exchange]:
    return [x for x in recorded.exchanges if x.method == "POST" and x.path == path]


def without_block(body: dict[str, Any], field: str) -> dict[str, Any]:
    """A forwarded body with memd's block taken out: what the client sent."""
    out = copy.deepcopy(body)
    for item in out[field] if isinstance(out[field], list) else ():
        content = item.get("content")
        if isinstance(content, list):
            item["content"] = [p for p in content if not (
                isinstance(p, dict) and str(p.get("text", "")).startswith(USER_OPEN))]
        elif isinstance(content, str) and content.startswith(USER_OPEN):
            item["content"] = content[content.index(USER_CLOSE) + len(USER_CLOSE):]
    return out


def as_blocks(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages body with each string content as the one text block the API reads it
    as: memd writes its block beside a string turn's text, as a block of its own."""
    return {**body, "messages": [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if isinstance(m.get("content"), str) else m for m in body["messages"]]}


def block(body: dict[str, Any], field: str) -> str:
    for item in body[field] if isinstance(body[field], list) else ():
        content = item.get("content")
        for p in content if isinstance(content, list) else ():
            if isinstance(p, dict) and str(p.get("text", "")).startswith(USER_OPEN):
                return str(p["text"])
    return ""


def test_every_run_completes_its_tool_task(recorded: Recorded) -> None:
    for n, done in enumerate(recorded.runs, 1):
        assert done.returncode == 0, (n, done.stdout[-2000:], done.stderr[-2000:])
        assert FINAL_ANSWER in done.stdout, (n, done.stdout[-2000:])
    assert sum(1 for x in chats(recorded, "/v1/messages") if x.body.get("tools")) >= 4
    assert sum(1 for x in chats(recorded, "/v1/responses")) >= 4


@pytest.mark.parametrize(("path", "field", "model"), [
    ("/v1/messages", "messages", "claude"), ("/v1/responses", "input", "codex")])
def test_what_the_client_sent_reaches_the_model_plus_the_block(
        recorded: Recorded, path: str, field: str, model: str) -> None:
    sent = [x.body for x in chats(recorded, path)]
    forwarded = getattr(recorded.models, model).requests
    assert len(sent) == len(forwarded)
    for mine, theirs in zip(sent, forwarded, strict=True):
        if field == "messages":
            assert as_blocks(without_block(theirs, field)) == as_blocks(mine)
        else:
            assert without_block(theirs, field) == mine
        for name in ("system", "tools", "instructions", "reasoning", "include"):
            assert repr(theirs.get(name)) == repr(mine.get(name))  # order kept too


def test_each_turn_is_stored_once_in_one_session_per_run(recorded: Recorded) -> None:
    turns = [x for x in recorded.exchanges if x.method == "POST" and x.path in (
        "/v1/messages", "/v1/responses") and x.response_headers.get("x-memd-session")]
    by_run: dict[int, set[str]] = {}
    for x in turns:
        by_run.setdefault(x.run, set()).add(x.response_headers["x-memd-session"])
    assert sorted(by_run) == [1, 2, 3, 4] and all(len(s) == 1 for s in by_run.values())
    assert len(recorded.sessions) == 4
    for messages in recorded.sessions.values():
        keys = [(m["role"], repr(m["content"]), repr(m.get("tool_calls"))) for m in messages]
        assert len(keys) == len(set(keys)), keys
        assert [m["role"] for m in messages][-3:] == ["assistant", "tool", "assistant"]


def test_side_calls_create_no_session(recorded: Recorded) -> None:
    for x in recorded.exchanges:
        if x.response_headers.get("x-memd-side") == "true":
            assert "x-memd-session" not in x.response_headers


def test_a_fact_told_to_one_client_reaches_the_other(recorded: Recorded) -> None:
    codex_asks = [x.body for x in chats(recorded, "/v1/responses") if x.run == 3]
    claude_asks = [x.body for x in chats(recorded, "/v1/messages")
                   if x.run == 4 and x.body.get("tools")]
    codex_sent = recorded.models.codex.requests[-len(codex_asks):]
    claude_sent = [b for b in recorded.models.claude.requests if b.get("tools")][
        -len(claude_asks):]
    assert all(HOST in block(b, "input") for b in codex_sent)
    assert all(BRANCH in block(b, "messages") for b in claude_sent)
    # the block is the same bytes on every step of the tool loop (the prompt cache holds)
    assert len({block(b, "input") for b in codex_sent}) == 1
    assert len({block(b, "messages") for b in claude_sent}) == 1
