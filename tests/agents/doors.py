"""Claude Code and Codex as the tests run them headless, and the scripted models behind
memd's Anthropic Messages and OpenAI Responses doors.

Both run fully offline: Claude Code with ``ANTHROPIC_BASE_URL``, a dummy key, its own
config dir and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``; Codex with its own
``CODEX_HOME`` whose ``config.toml`` names memd as a Responses provider. The scripted
models answer as :class:`agents.traffic.ToolLoop` does: call the client's tool that
reads the project's file while the newest user turn has no tool result, then answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anthropic_upstream import SIGNATURE, FakeAnthropic
from responses_upstream import ENCRYPTED, FakeResponses, message
from starlette.applications import Starlette
from starlette.routing import Route

from agents.clients import Client
from agents.traffic import FINAL_ANSWER


def _claude_config(home: Path, base: str) -> None:
    (home / ".claude").mkdir(parents=True, exist_ok=True)


def _claude(bin: Path, home: Path, base: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    return ([str(bin / "claude"), "-p", prompt, "--model", "claude-sonnet-5"],
            {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": "sk-ant-test",
             "CLAUDE_CONFIG_DIR": str(home / ".claude"),
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})


def _codex_config(home: Path, base: str) -> None:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(f'''model = "gpt-5-codex"
model_provider = "memd"
check_for_update_on_startup = false

[model_providers.memd]
name = "memd"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
''')


def _codex(bin: Path, home: Path, base: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    return ([str(bin / "codex"), "exec", "--skip-git-repo-check", prompt],
            {"CODEX_HOME": str(home / ".codex"), "OPENAI_API_KEY": "sk-test"})


CLAUDE = Client("claude", "Read", lambda p: {"file_path": p}, _claude_config, _claude)
CODEX = Client("codex", "exec_command", lambda p: {"cmd": f"cat {p}"}, _codex_config,
               _codex)


class ClaudeModel(FakeAnthropic):
    workfile = ""

    def _content(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]["content"]
        answered = isinstance(last, list) and any(b.get("type") == "tool_result"
                                                  for b in last)
        offered = {t.get("name") for t in body.get("tools") or ()}
        if answered or CLAUDE.read_tool not in offered:
            return [{"type": "text", "text": FINAL_ANSWER}]
        return [{"type": "tool_use", "id": f"toolu_{len(self.requests):04d}",
                 "name": CLAUDE.read_tool, "input": CLAUDE.read_args(self.workfile)}]


class CodexModel(FakeResponses):
    workfile = ""

    def _output(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        items = body["input"] if isinstance(body["input"], list) else []
        answered = bool(items) and items[-1].get("type") == "function_call_output"
        offered = {t.get("name") for t in body.get("tools") or ()}
        if answered or CODEX.read_tool not in offered:
            return [message(FINAL_ANSWER, len(self.requests))]
        return [{"type": "function_call", "id": f"fc_{len(self.requests)}",
                 "call_id": f"call_{len(self.requests):04d}", "name": CODEX.read_tool,
                 "arguments": json.dumps(CODEX.read_args(self.workfile)),
                 "status": "completed"}]


class ClaudeSession(ClaudeModel):
    """The scripted model of a conversation continued over several runs: it answers once
    its newest tool call has its result (a continued conversation puts the earlier turn's
    tool result and the new prompt in one user message, and each new prompt starts a tool
    step of its own), each reply after a signed thinking block when thinking is on."""

    pending = ""  # the id of the tool call not yet answered

    def _content(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]["content"]
        results = {b.get("tool_use_id") for b in last if isinstance(b, dict)} if isinstance(
            last, list) else set()
        thinking = [{"type": "thinking", "thinking": f"Step {len(self.requests)}.",
                     "signature": SIGNATURE}] if (body.get("thinking") or {}).get(
                         "type") in ("enabled", "adaptive") else []
        if self.pending and self.pending in results:
            self.pending = ""
            return [*thinking, {"type": "text", "text": FINAL_ANSWER}]
        self.pending = f"toolu_{len(self.requests):04d}"
        return [*thinking, {"type": "tool_use", "id": self.pending,
                            "name": CLAUDE.read_tool, "input": CLAUDE.read_args(self.workfile)}]


class CodexSession(CodexModel):
    """:class:`CodexModel` with a reasoning item (encrypted content) before each reply,
    as a reasoning model sends with ``store: false``."""

    def _output(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "reasoning", "id": f"rs_{len(self.requests)}", "summary": [],
                 "encrypted_content": ENCRYPTED}, *super()._output(body)]


class Models:
    """Both scripted models on one server: ``/v1/messages`` and ``/v1/responses``."""

    def __init__(self) -> None:
        self.claude, self.codex = ClaudeModel(), CodexModel()
        self.app = Starlette(routes=[
            Route("/v1/messages", self.claude.messages, methods=["POST"]),
            Route("/v1/responses", self.codex.handle, methods=["POST"])])

    def point_at(self, workfile: str) -> None:
        self.claude.workfile = self.codex.workfile = workfile
