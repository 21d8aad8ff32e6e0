"""The store's state as ``GET /health`` reports it: answered at once, never waited for.

A monitor asks /health because the store may be down; a check that waits out the
pool's connect timeout each time answers late exactly when it matters, and piles up
behind a dead database. So each check starts one probe of the store (one cheap read, in
a thread of its own; never two at once) and waits for it at most ``wait`` seconds: a
reachable store answers well within that and the check reports what it just read; a
probe still running then leaves the answer to the last known state, and its result to
the next check. A request that finds the store out of reach marks it so as it fails
(:meth:`StoreHealth.saw`), so the last known state is seldom older than the last request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from memd.errors import MemdError, StorageError, StoreUnavailable

log = logging.getLogger("memd.server")

PROBE_WAIT_SECONDS = 1.0  # how long /health waits for its probe before answering


class StoreHealth:
    """The last known reachability of the store and its count of pending jobs;
    ``probe`` reads that count (:meth:`memd.engine.memory.Memd.pending_jobs`)."""

    def __init__(self, probe: Callable[[], int], wait: float = PROBE_WAIT_SECONDS) -> None:
        self._probe = probe
        self.wait = wait
        self._lock = threading.Lock()
        self._done: threading.Event | None = None  # set when the running probe ends
        # The store was opened (the app is made over an open engine): reachable, with a
        # count not read yet.
        self._reachable = True
        self._pending: int | None = None

    def state(self) -> tuple[bool, int | None]:
        """(reachable, pending jobs) as the probe this call starts (or one that is
        running) finds them within ``wait`` seconds, else as last known."""
        with self._lock:
            done = self._done
            if done is None:
                done = self._done = threading.Event()
                threading.Thread(target=self._check, args=(done,), name="memd-health",
                                 daemon=True).start()
        done.wait(self.wait)
        with self._lock:
            return self._reachable, self._pending

    def saw(self, exc: MemdError) -> None:
        """A request failed with ``exc``: a store out of reach is known to be so."""
        if isinstance(exc, StoreUnavailable):
            with self._lock:
                self._reachable, self._pending = False, None

    def _check(self, done: threading.Event) -> None:
        pending: int | None = None
        try:
            pending = self._probe()
        except StorageError as exc:
            log.warning("health: the store is out of reach: %s", exc)
        finally:
            with self._lock:
                self._reachable, self._pending = pending is not None, pending
                self._done = None
            done.set()
