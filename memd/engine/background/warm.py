"""A user's vectors loaded ahead of their first search, in the background.

A store that keeps vectors in memory (SQLite's KNN cache) loads a user's on their first
search: on a large memory that is the slowest part of the first chat after the daemon
starts. ``memd serve`` in local mode, whose one user is known before any request comes,
has the load done by a thread as soon as it listens, so the wait falls between the start
and the first chat instead of inside it. The thread takes the store's lock only for the
load itself; a search that comes meanwhile waits for it (or reads the index), and its
answer is the same either way.

Team mode warms no one: no user is known until a request names one, loading every key
holder's would keep in memory vectors of users who may not come, and loading at a
user's first request would save little, their search coming right after it.
"""

from __future__ import annotations

import logging
import threading
import time

from memd.backends.base import VectorCache
from memd.errors import MemdError

log = logging.getLogger("memd.warm")


def warm_in_background(store: VectorCache, user_id: str) -> threading.Thread:
    """Start loading ``user_id``'s vectors in a daemon thread; returns the thread."""
    thread = threading.Thread(target=_warm, args=(store, user_id),
                              name="memd-warm-vectors", daemon=True)
    thread.start()
    return thread


def _warm(store: VectorCache, user_id: str) -> None:
    start = time.perf_counter()
    try:
        held = store.warm_vectors(user_id)
    except MemdError as exc:  # nothing is lost: the first search loads them instead
        log.warning("could not load the vectors of %s ahead of their first search: %s",
                    user_id, exc)
        return
    log.debug("vectors of %s loaded ahead of their first search: %d in %.0f ms",
              user_id, held, (time.perf_counter() - start) * 1000)
