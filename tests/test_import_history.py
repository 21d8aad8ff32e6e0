"""Importing the history clients keep (memd.imports): a small real-shaped file per
source, on both backends; the right sessions, messages, times and workspaces, nothing
learnt from text that is not the user's, and a second import adds nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from history_files import (
    PLANTED,
    T0,
    WRITERS,
    Expected,
    claude_code,
    claude_code_resumed,
    opencode_storage,
)
from pg import open_engine

from memd.engine.memory import Memd
from memd.imports import SOURCES, import_conversations, plan_import
from memd.types import MemoryFilter

USER = "alex"


def run_import(engine: Memd, source: str, path: Path) -> Any:
    conversations = list(SOURCES[source].conversations([path]))
    return import_conversations(engine, USER, conversations, run_jobs=True)


def stored(engine: Memd) -> list[tuple[str | None, float, list[tuple[str, str, float]]]]:
    sessions = sorted(engine.store.list_sessions(USER), key=lambda s: s.created_at)
    return [(s.workspace, s.created_at,
             [(m.role, m.content or "", m.created_at) for m in engine.messages(s.id, USER)])
            for s in sessions]


def assert_matches(got: list[Any], expected: Expected) -> None:
    assert len(got) == len(expected)
    for (ws, created, messages), (want_ws, want_created, want) in zip(got, expected,
                                                                       strict=True):
        assert ws == want_ws
        assert created == pytest.approx(want_created)
        assert [m[0] for m in messages] == [w[0] for w in want]
        for (role, content, at), (_, snippet, want_at) in zip(messages, want, strict=True):
            assert snippet in content, (role, content)
            assert at == pytest.approx(want_at), (role, content)


def learnt(engine: Memd) -> list[str]:
    """The text of every memory and fact the user has."""
    memories = [m.text for m in engine.store.list_memories(USER, MemoryFilter())]
    facts = [f"{f.category}/{f.key}={f.value}" for f in engine.facts(USER)]
    return memories + facts


@pytest.mark.parametrize("source", sorted(WRITERS))
def test_a_source_imports_its_conversations(backend: str, source: str,
                                            tmp_path: Path) -> None:
    path, expected = WRITERS[source](tmp_path / "history")
    with open_engine(backend, tmp_path / "d") as engine:
        counts = run_import(engine, source, path)
        assert counts.sessions == len(expected)
        assert_matches(stored(engine), expected)
        for session in engine.store.list_sessions(USER):
            assert session.metadata["client"] == SOURCES[source].client
        # the user's own words were learnt from; nothing the client or a tool wrote
        # (boilerplate, tool output, attachments, another branch, a subagent) was
        assert any(f.key == "name" and f.value == "Alex" for f in engine.facts(USER))
        text = "\n".join(learnt(engine))
        assert not [p for p in PLANTED if p in text], text
        rows = len([m for s in stored(engine) for m in s[2]])
        again = run_import(engine, source, path)
        assert (again.sessions, again.messages) == (0, 0)
        assert len([m for s in stored(engine) for m in s[2]]) == rows


def test_opencode_older_storage_folder(tmp_path: Path) -> None:
    path, expected = opencode_storage(tmp_path / "history")
    with open_engine("sqlite", tmp_path / "d") as engine:
        run_import(engine, "opencode", path)
        assert_matches(stored(engine), expected)


def test_a_grown_file_adds_only_its_new_turns(backend: str, tmp_path: Path) -> None:
    path, _ = claude_code(tmp_path / "history")
    with open_engine(backend, tmp_path / "d") as engine:
        run_import(engine, "claude-code", path)
        before = stored(engine)[0][2]
        path, expected = claude_code(tmp_path / "history", grow=True)
        plan = plan_import(engine, USER, SOURCES["claude-code"].conversations([path]))
        assert (plan.turns, plan.sessions) == (2, 0)
        counts = run_import(engine, "claude-code", path)
        assert (counts.sessions, counts.messages) == (0, 2)
        assert_matches(stored(engine), expected)
        assert stored(engine)[0][2][:len(before)] == before
        assert any(f.key == "indentation" and f.value == "tabs" for f in engine.facts(USER))


def test_a_resumed_claude_code_session_continues_the_one_it_resumed(
        backend: str, tmp_path: Path) -> None:
    """``claude --continue`` writes a file that repeats the resumed one's lines first:
    imported together (the resumed file read first), its lines are stored once, in the
    session they began in, and a second import adds nothing."""
    project, expected = claude_code_resumed(tmp_path / "history")
    with open_engine(backend, tmp_path / "d") as engine:
        counts = run_import(engine, "claude-code", project)
        assert counts.sessions == 1
        assert_matches(stored(engine), expected)
        assert any(f.key == "name" and f.value == "Alex" for f in engine.facts(USER))
        again = run_import(engine, "claude-code", project)
        assert (again.sessions, again.messages) == (0, 0)
        assert_matches(stored(engine), expected)


@pytest.mark.parametrize("first", ["s-9", "r-9"])
def test_resumed_files_imported_one_at_a_time_in_either_order(
        backend: str, first: str, tmp_path: Path) -> None:
    """Either file alone, then the other, then the resumed file grown: every line is
    stored once, and the grown file adds only its new turns."""
    project, expected = claude_code_resumed(tmp_path / "history")
    second = "r-9" if first == "s-9" else "s-9"
    with open_engine(backend, tmp_path / "d") as engine:
        run_import(engine, "claude-code", project / f"{first}.jsonl")
        run_import(engine, "claude-code", project / f"{second}.jsonl")
        assert_matches(stored(engine), expected)
        assert run_import(engine, "claude-code", project).messages == 0
        project, expected = claude_code_resumed(tmp_path / "history", grow=True)
        plan = plan_import(engine, USER, SOURCES["claude-code"].conversations([project]))
        assert (plan.turns, plan.sessions) == (2, 0)
        counts = run_import(engine, "claude-code", project / "r-9.jsonl")
        assert (counts.sessions, counts.messages) == (0, 2)
        assert_matches(stored(engine), expected)
        # the old file goes on by itself: its new turns, nothing the resumed one holds
        project, expected = claude_code_resumed(tmp_path / "history", grow=True, back=True)
        counts = run_import(engine, "claude-code", project)
        assert (counts.sessions, counts.messages) == (0, 2)
        assert_matches(stored(engine), expected)
        assert run_import(engine, "claude-code", project).messages == 0


def test_imported_times_are_the_conversations(tmp_path: Path) -> None:
    """Facts and memories carry the time the user said them, not the import's."""
    path, _ = WRITERS["chatgpt"](tmp_path / "history")
    with open_engine("sqlite", tmp_path / "d") as engine:
        run_import(engine, "chatgpt", path)
        name = next(f for f in engine.facts(USER) if f.key == "name")
        assert name.created_at == pytest.approx(T0 + 10)
        memories = engine.store.list_memories(USER, MemoryFilter())
        assert memories and all(T0 <= m.created_at <= T0 + 40 for m in memories)
        assert engine.now() > T0 + 10**6  # the engine's clock is the real one again


def test_a_side_request_in_a_history_is_skipped(tmp_path: Path) -> None:
    path, _ = WRITERS["continue"](tmp_path / "history")
    with open_engine("sqlite", tmp_path / "d") as engine:
        counts = run_import(engine, "continue", path)
        assert counts.skipped == 2  # the title request and its answer
        assert "Bob" not in "\n".join(m[1] for m in stored(engine)[0][2])


def test_a_title_is_stored_without_its_secrets(tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    key = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 3
    export.write_text(json.dumps([{
        "uuid": "c-1", "name": f"Rotate {key}", "created_at": "2025-03-01T10:00:00Z",
        "chat_messages": [{"sender": "human", "text": "rotate the key",
                           "created_at": "2025-03-01T10:00:00Z"}]}]))
    with open_engine("sqlite", tmp_path / "d") as engine:
        run_import(engine, "claude-ai", export)
        (session,) = engine.store.list_sessions(USER)
        assert session.title is not None and session.title.startswith("Rotate ")
        assert key not in session.title
