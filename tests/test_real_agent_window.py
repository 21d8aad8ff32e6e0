"""Real agent CLIs (qwen-code and opencode, from npm) run a long read-heavy task against a
model server with a small window: through memd each completes with every request
fitting; pointed at the model server directly, the model server refuses their requests
(qwen-code then summarizes its own history, blindly, after each refusal; opencode gives
up).

The model is scripted: it reads the workspace's files one by one (each about 2,500
tokens), then answers with the code word the last file holds. qwen-code's model server
has a 32k-token window (qwen-code's own system prompt and tool definitions are about 20k
tokens, its answer limit 8k) and refuses, as vLLM does, a request whose prompt and
``max_tokens`` pass it. opencode's has a 16k window and refuses, as llama.cpp does, a
prompt past it (opencode asks 32,000 tokens of answer of any model, which llama.cpp
answers within what the window leaves). Both count tokens as memd counts them, as the
other virtualization tests do (memd's accounting is what is checked, not a tokenizer's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents.clients import CLIENTS, Client, run
from agents.install import ensure_installed
from servers import free_port, serve, wait_healthy
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from test_real_agents import _memd_env

from memd.models.tokens import message_tokens, tool_tokens
from tests.agent_traffic import ScriptedUpstream

pytestmark = pytest.mark.slow

FILES = 12
CODE_WORD = "HELIOTROPE-7"
PROMPT = (f"Read each of the {FILES} files module_01.py to module_{FILES:02d}.py in this "
          "directory, one at a time, then tell me the code word in the last one.")


@dataclass(frozen=True)
class Setup:
    """A client and its model server: the window, and whether the server counts the
    request's ``max_tokens`` against it (vLLM) or only its prompt (llama.cpp)."""

    client: Client
    window: int
    counts_answer: bool

    def tokens(self, body: dict[str, Any]) -> int:
        """A request's prompt (and answer limit, where counted), as memd counts them."""
        answer = int(body.get("max_tokens") or 0) if self.counts_answer else 0
        return (sum(message_tokens(m) for m in body.get("messages") or ())
                + tool_tokens(body.get("tools"), None) + answer)


SETUPS = {c.name: Setup(c, *{"qwen-code": (32_768, True), "opencode": (16_384, False)}[c.name])
          for c in CLIENTS if c.name in ("qwen-code", "opencode")}


@dataclass
class Reader:
    """The scripted model: a ``read_file`` of the next file until it has read
    ``FILES`` of them, then the answer; a request without tools (a client's side
    request, such as its own compression of the history) gets a short text. What it
    has read is its own count: a client that compacts its history does not make it read
    again."""

    workdir: Path
    client: Client
    calls: int = 0
    answered: list[str] = field(default_factory=list)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):
            return {"role": "assistant", "content": "Files were read; nothing else."}
        if self.calls >= FILES:
            answer = f"The code word in module_{FILES:02d}.py is {CODE_WORD}."
            self.answered.append(answer)
            return {"role": "assistant", "content": answer}
        self.calls += 1
        path = str(self.workdir / f"module_{self.calls:02d}.py")
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{self.calls:04d}", "type": "function",
            "function": {"name": self.client.read_tool,
                         "arguments": json.dumps(self.client.read_args(path))}}]}


class SmallWindow(ScriptedUpstream):
    """The scripted model behind the setup's window: a request past it gets the 400 a
    model server gives, and no answer."""

    def __init__(self, reader: Reader, setup: Setup) -> None:
        super().__init__(model="scripted-model", responder=reader)
        self.setup = setup
        self.sizes: list[int] = []
        self.refused = 0

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        n = self.setup.tokens(body)
        self.sizes.append(n)
        window = self.setup.window
        if n > window:
            self.refused += 1
            self.requests.append(body)
            return JSONResponse({"error": {
                "message": f"This model's maximum context length is {window} tokens. However, "
                           f"you requested {n} tokens. Please reduce the length of the "
                           "messages.", "type": "invalid_request_error",
                "code": "context_length_exceeded"}}, status_code=400)
        return await super()._chat(request)


def _workspace(root: Path) -> Path:
    """``FILES`` Python modules of about 2,500 tokens each; the last holds the code
    word."""
    work = root / "work"
    work.mkdir(parents=True)
    for k in range(1, FILES + 1):
        lines = [f'"""module_{k:02d}: ledger helpers, part {k}."""', ""]
        for j in range(70):
            lines += [f"def ledger_entry_{k}_{j}(amount_cents: int, account: str) -> dict:",
                      f"    return {{'account': account, 'amount': amount_cents * {j + 3}, "
                      f"'part': {k}}}", ""]
        if k == FILES:
            lines.append(f"CODE_WORD = {CODE_WORD!r}")
        (work / f"module_{k:02d}.py").write_text("\n".join(lines) + "\n")
    return work


@dataclass
class Outcome:
    done: subprocess.CompletedProcess[str]
    upstream: SmallWindow
    reader: Reader
    reports: list[dict[str, Any]] = field(default_factory=list)


def _run(root: Path, setup: Setup, through_memd: bool) -> Outcome:
    bin = ensure_installed()
    work = _workspace(root)
    reader = Reader(work, setup.client)
    upstream = SmallWindow(reader, setup)
    with serve(upstream.app) as up:
        if not through_memd:
            done = run(setup.client, bin, root / "home", work, f"{up}/v1", PROMPT)
            return Outcome(done, upstream, reader)
        port = free_port()
        log = (root / "serve.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "memd.cli", "serve", "--port", str(port),
             "--context-window", str(setup.window)],
            env=_memd_env(root / "memd", f"{up}/v1"), stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(port, proc)
            done = run(setup.client, bin, root / "home", work, f"{base}/v1", PROMPT)
            calls = httpx.get(f"{base}/v1/calls", params={"limit": 500}).json()["data"]
            reports = [c["report"] for c in calls]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    return Outcome(done, upstream, reader, reports)


@pytest.fixture(scope="module", params=sorted(SETUPS))
def outcomes(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    setup = SETUPS[request.param]
    root = tmp_path_factory.mktemp(f"window-{setup.client.name}")
    yield {"direct": _run(root / "direct", setup, through_memd=False),
           "memd": _run(root / "memd", setup, through_memd=True)}


def compactions(upstream: SmallWindow) -> list[dict[str, Any]]:
    """The client's own summaries of its history: requests without tools that carry
    what the files held."""
    return [b for b in upstream.requests
            if not b.get("tools") and "ledger_entry_" in json.dumps(b.get("messages"))]


def test_the_task_is_larger_than_the_window(outcomes: dict[str, Outcome]) -> None:
    """What the files hold, with the client's own prompt and tools, is past the window:
    without management the last request cannot fit."""
    work = Path(outcomes["memd"].reader.workdir)
    files = sum(message_tokens({"content": p.read_text()}) for p in work.glob("*.py"))
    upstream = outcomes["memd"].upstream
    assert upstream.sizes[0] + files > upstream.setup.window


def test_directly_the_model_server_refuses_and_the_task_fails_or_is_compacted_blindly(
        outcomes: dict[str, Outcome]) -> None:
    """Pointed at the model server itself, the client's requests are refused as too
    long; it then gives up without the answer (opencode), or summarizes its history in a
    request of its own and goes on from the summary, after each refusal (qwen-code)."""
    direct = outcomes["direct"]
    assert direct.upstream.refused >= 1
    gave_up = CODE_WORD not in direct.done.stdout and not direct.reader.answered
    assert gave_up or len(compactions(direct.upstream)) >= direct.upstream.refused


def test_through_memd_the_cli_completes_the_task(outcomes: dict[str, Outcome]) -> None:
    through = outcomes["memd"]
    done = through.done
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert through.upstream.refused == 0
    assert max(through.upstream.sizes) <= through.upstream.setup.window
    assert compactions(through.upstream) == []  # it never had to summarize its history
    assert through.reader.calls >= FILES and through.reader.answered
    assert CODE_WORD in done.stdout
    engaged = [r["virtual"] for r in through.reports if "virtual" in r]
    assert engaged and any(v["transitions"] for v in engaged)
    assert sum(v["tokens"]["saved"] for v in engaged) > 0


def test_the_cli_sent_its_whole_history_and_memd_kept_what_it_must(
        outcomes: dict[str, Outcome]) -> None:
    """Every forwarded request keeps the user's task verbatim and the newest read whole;
    no tool message is without its call."""
    through = outcomes["memd"]
    for body in through.upstream.requests:
        if not body.get("tools"):
            continue
        messages = body["messages"]
        assert any(PROMPT in json.dumps(m.get("content")) for m in messages
                   if m.get("role") == "user")
        called = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
        assert all(m["tool_call_id"] in called for m in messages if m.get("role") == "tool")
    last = [b["messages"] for b in through.upstream.requests if b.get("tools") and any(
        m.get("role") == "tool" for m in b["messages"])][-1]  # the one answered
    newest = [m for m in last if m.get("role") == "tool"][-1]
    assert CODE_WORD in json.dumps(newest.get("content"))

