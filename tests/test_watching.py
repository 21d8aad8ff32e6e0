"""The directory watcher shared by the notes folder, the config file and history import."""

from __future__ import annotations

import time
from pathlib import Path

from servers import poll

from memd.watching import NEW_DIR_MS, FileWatcher


def test_a_new_directory_is_read_again_once_its_own_watch_is_in_place(tmp_path: Path) -> None:
    """A file that lands in a new directory before the directory's own watch is in place
    raises no event; the handler runs again NEW_DIR_MS after a group that added a
    directory, so a reader of the whole tree sees that file too."""
    calls: list[float] = []
    watcher = FileWatcher("test", tmp_path, lambda _: True,
                          lambda: calls.append(time.monotonic()), recursive=True)
    watcher.start()
    try:
        poll(lambda: len(calls) == 1, "the first read, once the watch is in place")
        (tmp_path / "proj").mkdir()
        poll(lambda: len(calls) >= 3, "the new directory's read, then the read again")
        assert calls[2] - calls[1] >= NEW_DIR_MS / 1000 * 0.9
    finally:
        watcher.stop()
