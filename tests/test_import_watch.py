"""``memd import-history --watch``: a client's new turns are imported as it writes them
(memd.imports.watch)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from history_files import claude_code
from pg import open_engine

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
