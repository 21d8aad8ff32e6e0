"""The scheduler's recent sweeps, as this daemon ran them: when each task ran, how many
jobs it made (itself, or one per user it fanned out to), how many are done, the time they
took, what they changed (summed counts) and their errors. The inspector's Jobs & health
page and ``GET /v1/sweeps`` read it.

It is kept in memory, a short ring per daemon, not in the store: the schedule itself is
already durable (each task's recurring job keeps its last run in the queue), and this is
a diagnostic view of the runs since the daemon started, which a restart may forget
without losing anything memd needs. With several daemons on one database each shows the
runs it did.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: How many runs are kept, newest first out.
KEPT = 100
#: How much of an error's message is kept.
ERROR_CHARS = 300


@dataclass(slots=True)
class SweepRun:
    """One run of a scheduled task and the jobs it fanned out to."""

    task: str
    started_at: float
    jobs: int  # the jobs it made; 0 for user sweeps queued before this daemon started
    per_user: bool = False  # fanned out to one job per user, or one job over the store
    done: int = 0
    seconds: float = 0.0
    counts: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "started_at": self.started_at, "jobs": self.jobs,
                "per_user": self.per_user, "done": self.done, "seconds": round(self.seconds, 4),
                "counts": dict(self.counts), "failed": len(self.errors),
                "errors": list(self.errors)}


class SweepLog:
    """A ring of the latest :class:`SweepRun`; the job worker writes it, API threads
    read it, under one lock."""

    def __init__(self, kept: int = KEPT) -> None:
        self._runs: deque[SweepRun] = deque(maxlen=kept)
        self._lock = threading.Lock()

    def start(self, task: str, now: float, jobs: int, per_user: bool = False) -> SweepRun:
        run = SweepRun(task, now, jobs, per_user)
        with self._lock:
            self._runs.append(run)
        return run

    def latest(self, task: str, now: float) -> SweepRun:
        """The newest run of ``task``, which a user's sweep belongs to; one is started
        when this daemon has none (the sweep was queued before it started)."""
        with self._lock:
            for run in reversed(self._runs):
                if run.task == task:
                    return run
        return self.start(task, now, 0, per_user=True)

    def finished(self, run: SweepRun, seconds: float, counts: object,
                 error: BaseException | None = None) -> None:
        """Add one job's outcome to ``run``: its time, its numeric counts, its error."""
        with self._lock:
            run.done += 1
            run.seconds += seconds
            if isinstance(counts, dict):
                for key, value in counts.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        run.counts[str(key)] = run.counts.get(str(key), 0) + value
            if error is not None:
                run.errors.append(f"{type(error).__name__}: {error}"[:ERROR_CHARS])

    def recent(self, limit: int = KEPT) -> list[SweepRun]:
        """The latest runs, newest first."""
        with self._lock:
            return list(reversed(self._runs))[:limit]
