"""Keeping up with a client that does not go through the proxy: watch its history
folders and import each file's new turns as the client writes them.

Each pass reads only the files whose size or modification time changed since the pass
before (the first pass reads them all), and imports them as ``memd import-history``
does; the write path's idempotency (:mod:`memd.imports.write`) makes a file read twice,
or caught mid-write, cost nothing but the read. A file that cannot be read is logged and
retried at its next change; the watch goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memd.errors import MemdError
from memd.imports.base import Source
from memd.imports.write import ImportCounts, import_conversations
from memd.watching import FileWatcher

if TYPE_CHECKING:
    from memd.engine.memory import Memd

log = logging.getLogger("memd.imports")


class HistoryWatcher:
    """Imports the new turns of ``source``'s files under ``roots`` for ``user_id`` now
    and after every change, telling ``reported`` what each pass imported."""

    def __init__(self, engine: Memd, user_id: str, source: Source, roots: list[Path],
                 reported: Callable[[ImportCounts], object] | None = None) -> None:
        self.engine = engine
        self.user_id = user_id
        self.source = source
        self.roots = roots
        self.reported = reported
        self._seen: dict[Path, tuple[int, ...]] = {}
        self._lock = threading.Lock()  # one pass at a time, whichever root changed
        self._watchers = [FileWatcher(f"import-{source.name}", root, self._accept,
                                      self.sync, recursive=True) for root in roots]

    def _accept(self, path: Path) -> bool:
        return not path.name.startswith(".") or path.name.endswith(".md")

    def sync(self) -> ImportCounts:
        """One pass: import what changed since the last one."""
        with self._lock:
            counts = ImportCounts()
            for file in self._changed():
                try:
                    conversations = self.source.read_file(file)
                    counts.add(import_conversations(self.engine, self.user_id,
                                                    conversations, run_jobs=True))
                except MemdError as exc:
                    log.warning("import-history %s: %s: %s", self.source.name, file, exc)
                    self._seen.pop(file, None)  # read again at its next change
            if counts.messages and self.reported is not None:
                self.reported(counts)
            return counts

    def _changed(self) -> list[Path]:
        changed = []
        for root in self.roots:
            try:
                files = self.source.files(root)
            except MemdError:
                continue  # not there (yet)
            for file in files:
                mark = _mark(file)
                if mark is None:
                    continue
                if self._seen.get(file) != mark:
                    self._seen[file] = mark
                    changed.append(file)
        return changed

    def start(self) -> None:
        """Watch every root (the first pass runs as each watch is in place)."""
        for watcher in self._watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self._watchers:
            watcher.stop()


def _mark(file: Path) -> tuple[int, ...] | None:
    """What tells that ``file`` changed: its size and time, and those of its write-ahead
    log (a database in WAL mode takes its writes there until a checkpoint)."""
    marks: list[int] = []
    for path in (file, file.with_name(file.name + "-wal")):
        try:
            stat = path.stat()
        except OSError:
            if path is file:
                return None
            continue
        marks += [stat.st_size, stat.st_mtime_ns]
    return tuple(marks)
