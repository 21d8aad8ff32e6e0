"""Watching a directory for changes, for any layer: the engine's notes folder and the
daemon's config file both use it.

A watcher is a thread running :func:`watchfiles.watch` over one directory, filtered to
the files it cares about, until its stop event is set. Events are grouped (an editor's
save is often several writes and a rename) and each group triggers one call of its
handler, which re-reads what it watches whole, so a coalesced event never leaves the
reader out of step. The first call happens as soon as the watch is in place, which
catches what changed while the process was starting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("memd.watch")

# watchfiles: yield a group once no event came for STEP_MS, or after DEBOUNCE_MS at most;
# READY_MS is how soon an idle watch reports that it is in place
DEBOUNCE_MS = 400
STEP_MS = 50
READY_MS = 200
# A directory created under a recursive watch gets its own watch only once its creation
# is seen: a file that lands in it before then raises no event. After a group that adds a
# directory the handler runs once more, NEW_DIR_MS later, and reads what landed meanwhile.
NEW_DIR_MS = 250


class FileWatcher:
    """Calls ``on_change`` in a thread of its own once the watch over ``directory`` is
    in place, then after each group of changes to a path ``accept`` takes."""

    def __init__(self, name: str, directory: Path, accept: Callable[[Path], bool],
                 on_change: Callable[[], object], *, recursive: bool = False) -> None:
        self.name = name
        self.directory = directory
        self.accept = accept
        self.on_change = on_change
        self.recursive = recursive
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"memd-watch-{name}",
                                        daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        """Start watching; returns once the watch is in place (or after ``timeout``)."""
        self._thread.start()
        self._ready.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        import watchfiles

        try:
            for changes in watchfiles.watch(
                self.directory, watch_filter=lambda _, path: self.accept(Path(path)),
                stop_event=self._stop, debounce=DEBOUNCE_MS, step=STEP_MS,
                rust_timeout=READY_MS, yield_on_timeout=True, raise_interrupt=False,
                recursive=self.recursive,
            ):
                first = not self._ready.is_set()
                self._ready.set()
                if changes or first:
                    self._changed()
                if self.recursive and any(change == watchfiles.Change.added
                                          and Path(path).is_dir() for change, path in changes):
                    if self._stop.wait(NEW_DIR_MS / 1000):
                        break
                    self._changed()
        except (OSError, RuntimeError) as exc:  # the directory went away, inotify ran out
            log.warning("%s: stopped watching %s: %s", self.name, self.directory, exc)
        finally:
            self._ready.set()

    def _changed(self) -> None:
        try:
            self.on_change()
        # The handler reports its own failures; anything else is a bug, which must not
        # end the watch for the daemon's lifetime with no one told but this log.
        except Exception:
            log.exception("%s: unexpected error while applying a change", self.name)
