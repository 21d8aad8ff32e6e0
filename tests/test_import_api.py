"""Importing history through the CLI (``memd import-history``) and the HTTP route
(``POST /v1/import``), and end to end: a proxied chat recalls what only the imported
history holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from history_files import T0, WRITERS, claude_code, iso
from pg import BACKENDS
from servers import FakeUpstream, memd_in_front

from memd.cli import main
from memd.engine.block.inject import USER_CLOSE, USER_OPEN
from memd.engine.memory import Memd


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, result.output
    return result.output


def test_cli_dry_run_then_import_then_nothing_new(engine: Memd, tmp_path: Path,
                                                  hermetic_env: Path) -> None:
    path, _ = WRITERS["aider"](tmp_path / "history")
    data = ["--data-dir", str(hermetic_env)]
    dry = cli("import-history", "aider", str(path), "--dry-run", *data)
    assert "aider" in dry and "rocket" in dry and "dry run: nothing written" in dry
    assert "4 new turns in 2 conversations" in dry
    done = cli("import-history", "aider", str(path), *data)
    assert "imported 4 messages of 4 new turns (2 new sessions" in done
    assert "turns/s" in done
    assert "importing: 4 of 4" in done  # no terminal: one line of progress, at the end
    again = cli("import-history", "aider", str(path), *data)
    assert "nothing to import" in again


def test_cli_reads_a_sources_default_place(tmp_path: Path, hermetic_env: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _, expected = claude_code(tmp_path / "home" / ".claude")
    out = cli("import-history", "claude-code", "--dry-run", "--data-dir", str(hermetic_env))
    assert "claude-code" in out and "rocket" in out
    assert f"{len(expected[0][2])} new turns" in out


def test_cli_says_what_is_wrong(tmp_path: Path, hermetic_env: Path) -> None:
    data = ["--data-dir", str(hermetic_env)]
    assert "does not exist" in cli("import-history", "cline", str(tmp_path / "none"),
                                   *data, code=2)
    bad = tmp_path / "conversations.json"
    bad.write_text("{not json")
    assert "not valid JSON" in cli("import-history", "chatgpt", str(bad), *data, code=2)
    assert "Invalid value for 'SOURCE'" in cli("import-history", "nope", *data, code=2)


def upload(source: str, path: Path, **extra: Any) -> dict[str, Any]:
    return {"source": source, "name": str(path), "content": path.read_text(), **extra}


def test_route_imports_a_file_once(client: TestClient, engine: Memd, tmp_path: Path) -> None:
    root, expected = claude_code(tmp_path / "history")
    body = upload("claude-code", root / "-home-u-src-rocket" / "s-1.jsonl", user_id="alex")
    first = client.post("/v1/import", json=body)
    assert first.status_code == 200, first.text
    assert first.json()["messages"] == len(expected[0][2])
    assert first.json()["sessions_created"] == 1
    assert first.json()["workspaces"] == [{"source": "claude-code", "workspace": "rocket",
                                           "conversations": 1, "turns": len(expected[0][2])}]
    again = client.post("/v1/import", json=body).json()
    assert (again["messages"], again["sessions_created"]) == (0, 0)
    # a workspace in the path puts the file's conversations there
    path, _ = WRITERS["chatgpt"](tmp_path / "gpt")
    scoped = client.post("/w/personal/v1/import", json=upload("chatgpt", path, user_id="alex"))
    assert scoped.json()["workspaces"][0]["workspace"] == "personal"
    assert {s.workspace for s in engine.store.list_sessions("alex")} == {"rocket", "personal"}


@pytest.mark.parametrize("body,says", [
    ({"source": "chatgpt", "content": "{"}, "not valid JSON"),
    ({"source": "chatgpt", "content": "{}"}, "not a ChatGPT export"),
    ({"source": "claude-ai", "content": "[{\"name\": 1}]"}, "not a Claude.ai export"),
    ({"source": "claude-code", "content": "{\"type\": \"user\"\nnot json\n{}"}, "line 1"),
    ({"source": "opencode", "content": "x"}, "memd import-history opencode"),
    ({"source": "vim", "content": "x"}, "unknown history source"),
])
def test_route_refuses_bad_files(client: TestClient, engine: Memd, body: dict[str, Any],
                                 says: str) -> None:
    resp = client.post("/v1/import", json=body)
    assert resp.status_code == 400 and says in resp.json()["error"]["message"], resp.text
    assert engine.store.list_sessions("local") == []


def test_route_writes_nothing_of_a_file_that_fails(client: TestClient, engine: Memd,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two conversations; the store fails on the second: the first is not kept either."""
    convs = [{"uuid": f"c-{n}", "name": "x", "created_at": iso(T0), "chat_messages": [
        {"sender": "human", "text": f"My name is Alex {n}", "created_at": iso(T0)}]}
        for n in (1, 2)]
    appended = 0
    real = engine.append

    def failing(*args: Any) -> Any:
        nonlocal appended
        appended += 1
        if appended == 2:
            from memd.errors import StorageError
            raise StorageError("disk full")
        return real(*args)

    monkeypatch.setattr(engine, "append", failing)
    resp = client.post("/v1/import", json={"source": "claude-ai",
                                           "content": json.dumps(convs)})
    assert resp.status_code >= 500
    assert engine.store.list_sessions("local") == []


@pytest.fixture(params=BACKENDS)
def proxied(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, Memd]]:
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d", request.param) as (base, engine):
        yield base, upstream, engine


def test_a_proxied_chat_recalls_what_only_the_import_holds(
        proxied: tuple[str, Any, Memd], tmp_path: Path) -> None:
    base, upstream, engine = proxied
    project = tmp_path / "projects" / "-home-u-src-rocket"
    project.mkdir(parents=True)
    line = {"type": "user", "cwd": "/home/u/src/rocket", "sessionId": "s-9",
            "timestamp": iso(T0), "message": {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>ignore</system-reminder>"},
                {"type": "text", "text": "I deploy with Nomad on Tuesdays"}]}}
    reply = {"type": "assistant", "cwd": "/home/u/src/rocket", "sessionId": "s-9",
             "timestamp": iso(T0 + 5), "message": {"id": "m1", "role": "assistant",
                                                   "content": [{"type": "text",
                                                                "text": "Noted."}]}}
    path = project / "s-9.jsonl"
    path.write_text(f"{json.dumps(line)}\n{json.dumps(reply)}\n")
    resp = httpx.post(f"{base}/v1/import", json=upload("claude-code", path), timeout=30)
    assert resp.status_code == 200 and resp.json()["messages"] == 2, resp.text
    engine.jobs.run_due()
    client = openai.OpenAI(base_url=f"{base}/w/rocket/v1", api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": "Which tool do I deploy with?"}])
    sent = upstream.requests[-1]["messages"][-1]["content"]
    text = sent if isinstance(sent, str) else "".join(p.get("text", "") for p in sent)
    assert USER_OPEN in text
    block = text[text.index(USER_OPEN):text.index(USER_CLOSE)]
    assert "Nomad" in block
    assert "ignore" not in block
