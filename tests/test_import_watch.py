"""``memd import-history --watch``: a client's new turns are imported as it writes them
(memd.imports.watch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from history_files import claude_code, claude_code_resumed
from pg import open_engine

import memd
from memd.imports import ImportCounts, source
from memd.imports.watch import HistoryWatcher


def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait for the watcher's thread to have done something (not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the watcher did not import in time"
        time.sleep(0.05)


def test_a_watched_history_imports_new_turns_as_they_are_written(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    passes: list[ImportCounts] = []
    with open_engine("sqlite", tmp_path / "d") as engine:
        def messages() -> int:
            return sum(len(engine.messages(s.id, "alex"))
                       for s in engine.store.list_sessions("alex"))

        watcher = HistoryWatcher(engine, "alex", source("claude-code"), [root / "projects"],
                                 passes.append)
        watcher.start()
        try:
            assert messages() == 0  # nothing there yet
            turns = len(claude_code(root)[1][0][2])  # the client writes a session
            until(lambda: messages() == turns)
            claude_code(root, grow=True)  # and two more turns of it
            until(lambda: messages() == turns + 2)
        finally:
            watcher.stop()
        # every pass that imported said so (a pass may catch a file mid-write: the rest
        # comes with the next one)
        assert sum(p.messages for p in passes) == turns + 2 and all(p.messages for p in passes)
        assert watcher.sync().messages == 0  # nothing changed since: nothing read
        assert any(f.key == "indentation" for f in engine.facts("alex"))


def test_a_file_that_cannot_be_read_does_not_stop_the_watch(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "broken.json").write_text("{not json")
    with open_engine("sqlite", tmp_path / "d") as engine:
        watcher = HistoryWatcher(engine, "alex", source("continue"), [folder])
        assert watcher.sync().messages == 0
        (folder / "ok.json").write_text(
            '{"sessionId": "ok", "history": [{"message": {"role": "user", '
            '"content": "My name is Alex"}}]}')
        assert watcher.sync().messages == 1


def test_the_cli_watch_imports_a_turn_appended_to_a_transcript(tmp_path: Path) -> None:
    """``memd import-history --watch claude-code`` as a user runs it: the import, then
    the watch, which stores a turn the client appends to its transcript."""
    root = tmp_path / "claude"
    turns = len(claude_code(root)[1][0][2])
    data = tmp_path / "d"
    env = {**os.environ, "MEMD_DATA_DIR": str(data), "MEMD_EMBEDDER": "fake",
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.cli", "import-history", "claude-code",
         str(root / "projects"), "--user", "alex", "--watch"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # the watch is in place once it says so on stderr (after the progress bar)
        assert any("watching" in line for line in iter(proc.stderr.readline, ""))
        until(lambda: any(f"imported {turns} messages" in line for line in lines))
        claude_code(root, grow=True)  # the client writes two more turns of the session
        until(lambda: any("imported 2 messages" in line for line in lines))
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C stops the watch
        proc.wait(timeout=30)
    assert proc.returncode == 0
    with memd.open(data) as engine:
        sessions = engine.store.list_sessions("alex")
        texts = [m.content for s in sessions for m in engine.messages(s.id, "alex")]
    assert "I prefer tabs over spaces" in texts and len(texts) == turns + 2


def test_a_watched_resumed_session_is_stored_once(tmp_path: Path) -> None:
    """The client resumes a session the watch imported: the new file's repeated lines
    are not stored again, its new turns join the session they continue."""
    root = tmp_path / "claude"
    with open_engine("sqlite", tmp_path / "d") as engine:
        watcher = HistoryWatcher(engine, "alex", source("claude-code"), [root / "projects"])
        project, expected = claude_code_resumed(root)
        resumed = (project / "r-9.jsonl").read_bytes()
        (project / "r-9.jsonl").unlink()  # the original session, before the resume
        assert watcher.sync().messages == 2
        (project / "r-9.jsonl").write_bytes(resumed)  # claude --continue
        assert watcher.sync().messages == len(expected[0][2]) - 2
        (session,) = engine.store.list_sessions("alex")
        assert [m.role for m in engine.messages(session.id, "alex")] == [
            role for role, _, _ in expected[0][2]]
