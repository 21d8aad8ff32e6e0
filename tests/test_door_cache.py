"""Prompt-cache stability on recorded client traffic: a multi-turn Claude Code session
and a multi-turn Codex session (tests/fixtures/doors, recorded with
``agents.record_doors``: the requests as the clients sent them) replayed through memd's
Anthropic Messages and OpenAI Responses doors, one request after another, to scripted
models that answer as they did when it was recorded and compute their prompt cache from
the bytes memd forwards (:mod:`bench.prompt_cache`).

Per call: the share of the forwarded prompt (tools -> system -> messages) that is the
previous forwarded prompt from the start, byte for byte, is at least 0.95 (as the Chat
Completions door's); and the cache figures the model reported are logged with the call,
in ``GET /v1/calls`` and ``memd calls``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from agents.doors import ClaudeSession, CodexSession
from click.testing import CliRunner
from servers import memd_in_front, serve
from starlette.applications import Starlette
from starlette.routing import Route

from bench.prompt_cache import PromptCache, responses_prompt_bytes
from memd.cli import main as cli
from memd.engine.block.inject import USER_OPEN
from memd.engine.memory import Memd

FIXTURES = Path(__file__).parent / "fixtures" / "doors"
WORKFILE = "/home/dev/project/notes.txt"  # where the recording's notes.txt reads
SHARE = 0.95


def recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text("utf-8").splitlines()]


class CachingClaude(ClaudeSession):
    """Claude Code's scripted model, with a prompt cache computed from what arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = PromptCache()
        self.usages: list[dict[str, int]] = []

    def _usage(self, raw: bytes, body: dict[str, Any]) -> dict[str, int]:
        self.usages.append(self.cache.usage(body))
        return self.usages[-1]


class CachingCodex(CodexSession):
    """Codex's scripted model, reporting as cached the bytes each request shares with
    the previous one from the start (OpenAI's automatic prefix cache, no breakpoints)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = PromptCache()

    def _usage(self, body: dict[str, Any]) -> dict[str, Any]:
        cached = self.cache.automatic(responses_prompt_bytes(body))
        return {"input_tokens": self.cache.shared[-1][1], "output_tokens": 9,
                "total_tokens": self.cache.shared[-1][1] + 9,
                "input_tokens_details": {"cached_tokens": cached}}


def settle(engine: Memd) -> None:
    """Wait for memd's background jobs, as the model's answer time lets them finish."""
    deadline = time.monotonic() + 30
    while engine.store.pending_jobs() and time.monotonic() < deadline:
        time.sleep(0.01)


def remember(engine: Memd) -> None:
    """Memories the recorded turns recall, so memd adds a block to every call."""
    engine.add("I deploy to the staging host after reading notes.txt", "local")
    engine.add("notes.txt says whether the tests use pytest", "local")


def replay(base: str, engine: Memd, records: list[dict[str, Any]], path: str) -> None:
    for record in records:
        headers = {**record["headers"], "x-api-key": "sk-ant-test",
                   "authorization": "Bearer sk-test"}
        r = httpx.post(base + path, content=json.dumps(record["body"]), headers=headers,
                       timeout=60)
        assert r.status_code == 200, r.text
        settle(engine)


def has_block(items: list[dict[str, Any]]) -> bool:
    """Whether memd's memory block is in a forwarded conversation."""
    return any(isinstance(p, dict) and str(p.get("text", "")).startswith(USER_OPEN)
               for item in items if isinstance(item.get("content"), list)
               for p in item["content"])


def test_replayed_claude_code_session_keeps_the_prompt_cache(tmp_path: Path) -> None:
    records = recorded("claude-code.jsonl")
    assert len({r["run"] for r in records}) == 3 and len(records) == 6
    model = CachingClaude()
    model.workfile = WORKFILE
    with serve(model.app) as up, memd_in_front(
            model.app, tmp_path / "d", upstream_anthropic_url=up) as (base, engine):
        remember(engine)
        replay(base, engine, records, "/v1/messages?beta=true")
        calls = httpx.get(f"{base}/v1/calls", params={"limit": 50},
                          timeout=60).json()["data"][::-1]
    # the scripted model answered as it did when it was recorded: memd forwarded the
    # session's own history, the memory block aside
    assert [len(r["messages"]) for r in model.requests] == [
        len(r["body"]["messages"]) for r in records]
    assert [has_block(r["messages"]) for r in model.requests] == [True] * len(records)
    # one conversation, one session
    assert len({c["session_id"] for c in calls}) == 1
    # every call after the first starts with the previous call's prompt
    shares = [shared / size for shared, size in model.cache.shared[1:]]
    assert min(shares) >= SHARE, shares
    # and reads it from the cache: Claude Code resends a typed message as a string after
    # sending it as blocks, and memd's block stays a block of its own beside the text, so
    # the message renders the same both times and the read goes on past it
    reads = [u["cache_read_input_tokens"] for u in model.usages]
    read = [n / size for n, (_, size) in zip(reads[1:], model.cache.shared[1:], strict=True)]
    # (the first call's breakpoint ends its first message, before the system message
    # Claude Code sends after it: the second call reads up to there)
    assert reads[0] == 0 and read[0] >= 0.9 and min(read[1:]) >= 0.99, read
    # memd logs what the model said of its cache, per call, and `memd calls` shows it
    assert [c["metadata"]["usage"]["cache_read_input_tokens"] for c in calls] == reads
    assert [c["metadata"]["usage"]["cache_creation_input_tokens"] for c in calls] == [
        u["cache_creation_input_tokens"] for u in model.usages]
    listed = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "d"), "calls"])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()[::-1]
    assert [line.rsplit("  ", 1)[-1] for line in lines] == [
        f"cache read={u['cache_read_input_tokens']} "
        f"cache written={u['cache_creation_input_tokens']}" for u in model.usages]


def test_replayed_codex_session_keeps_the_prompt_cache(tmp_path: Path) -> None:
    records = recorded("codex.jsonl")
    assert len({r["run"] for r in records}) == 3 and len(records) == 6
    model = CachingCodex()
    model.workfile = WORKFILE
    app = Starlette(routes=[Route("/v1/responses", model.handle, methods=["POST"])])
    with memd_in_front(app, tmp_path / "d") as (base, engine):
        remember(engine)
        replay(base, engine, records, "/v1/responses")
        calls = httpx.get(f"{base}/v1/calls", params={"limit": 50},
                          timeout=60).json()["data"][::-1]
    assert [len(r["input"]) for r in model.requests] == [
        len(r["body"]["input"]) for r in records]
    assert [has_block(r["input"]) for r in model.requests] == [True] * len(records)
    assert len({c["session_id"] for c in calls}) == 1
    shares = [shared / size for shared, size in model.cache.shared[1:]]
    assert min(shares) >= SHARE, shares
    assert [c["metadata"]["usage"]["cache_read_input_tokens"] for c in calls] == [
        shared for shared, _ in model.cache.shared]
