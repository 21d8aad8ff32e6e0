"""The scheduler: memory's background life (the maintenance sweeps, retention, the
history's partitions ahead) as recurring durable jobs, so that a daemon left running
sweeps on its own, a restart re-runs nothing that ran, and several daemons on one
database run each sweep once.

Each task of :data:`TASKS` has one recurring job in the queue, of kind ``schedule``,
under a fixed id (``schedule-<task>``): :meth:`Scheduler.tick` (the daemon's job worker
calls it every ``maintenance.tick`` seconds) enqueues it, due at once, where it is
missing, and an insert that finds the id taken does nothing, so two daemons make one job.
The queue's lease and claim (SKIP LOCKED on PostgreSQL) hand each run to one worker.
A run does not complete its job: it puts it back, due one interval later, its last run
in the payload (:meth:`memd.backends.base.JobQueue.reschedule_job`). The schedule is
therefore the queue itself: durable, visible in ``memd jobs``, and a job parked as dead
after repeated failures is tried again by the tick once an interval has passed since.

A task over the whole store (``expiry``: one statement per table; ``partitions``: DDL
outside any transaction) runs inside its ``schedule`` job. A task over users' rows fans
out instead: the run lists the users and enqueues one ``sweep`` job per user
(``sweep-<task>-<user>``; one still queued from a former run is not doubled), in the
transaction that reschedules it, so a run whose lease ran out cannot fan out twice. A
``sweep`` job runs its user's sweep in one short transaction that also deletes the job
(as ``ingest`` does, memd.engine.background.jobs): decay lowers importance once per run, so a
sweep must not apply twice after a crash. One user's sweep never holds the others up,
and no transaction spans every user.

Intervals are settings (:class:`memd.config.Maintenance`, seconds; 0 turns a task off,
and its queued job is dropped); ``retention`` also needs ``retention_days``. A shortened
interval takes effect at the next tick. ``compaction`` and ``consolidation`` only queue
their user's jobs (``compact`` per session past its threshold, ``consolidate``), which
need the embedder and the helper model: the job runner has them, a sweep does not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memd.engine.background import compact, consolidate
from memd.engine.background import maintenance as mt
from memd.engine.background.sweeps import SweepLog, SweepRun
from memd.types import SessionStatus

if TYPE_CHECKING:
    from memd.backends.base import MemoryStore, SessionStore, Store
    from memd.config import Settings
    from memd.types import Job

log = logging.getLogger(__name__)

SCHEDULE = "schedule"  # the job kind of a task's recurring job
SWEEP = "sweep"  # the job kind of one user's sweep

Counts = object  # what a sweep returns, logged as it is (counts, never content)
SKIPPED = object()  # a sweep job another claim completed first: not run, not counted


@dataclass(frozen=True, slots=True)
class Task:
    """A scheduled sweep: ``run(store, settings, now, user_id)``; ``users`` lists the
    users it fans out to, or is None for a task over the whole store (user_id None).
    ``scrub``: a run that deleted messages is followed by :meth:`Store.scrub`, so their
    text leaves the files (SQLite's full-text segments and WAL keep it until then)."""

    name: str
    run: Callable[[Store, Settings, float, str | None], Counts]
    users: Callable[[Store], list[str]] | None = None
    scrub: bool = False


def _memory_users(store: MemoryStore) -> list[str]:
    return store.memory_users()


def _session_users(store: SessionStore) -> list[str]:
    return store.session_users()


def _retention(store: Store, settings: Settings, now: float, user: str | None) -> Counts:
    assert user is not None
    return mt.retention_sweep(store, now, settings.retention_days, user)


def _compaction(store: Store, settings: Settings, now: float, user: str | None) -> Counts:
    """Queue a ``compact`` job for each of the user's active sessions that may need one,
    and a closing one for each session that ended and is not an episode yet (a queued
    job is not doubled)."""
    assert user is not None
    if not compact.enabled(settings):
        return {"queued": 0, "closing": 0}
    queued = closing = 0
    for s in store.list_sessions(user, limit=2**31 - 1):
        if s.status == SessionStatus.ACTIVE:
            queued += compact.may_need(settings, s) and compact.enqueue(store, user, s.id, now)
        elif (s.turn_count >= compact.CLOSE_MIN_TURNS
              and not s.metadata.get(compact.EPISODE_KEY)):
            closing += compact.enqueue(store, user, s.id, now, closing=True)
    return {"queued": queued, "closing": closing}


def _consolidation(store: Store, _s: Settings, now: float, user: str | None) -> Counts:
    assert user is not None
    return {"queued": int(consolidate.enqueue(store, user, now))}


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("partitions", lambda store, _s, now, _u: store.ensure_history_partitions(now)),
    Task("expiry", lambda store, _s, now, _u: mt.expiry_sweep(store, now)),
    Task("promotion", lambda store, _s, now, u: mt.promotion_sweep(store, now, u),
         _memory_users),
    Task("demotion", lambda store, _s, now, u: mt.demotion_sweep(store, now, u),
         _memory_users),
    Task("decay", lambda store, _s, now, u: mt.decay_sweep(store, now, user_id=u),
         _memory_users),
    Task("prune", lambda store, _s, now, u: mt.prune_sweep(store, now, u), _memory_users),
    Task("retention", _retention, _session_users, scrub=True),
    Task("compaction", _compaction, _session_users),
    Task("consolidation", _consolidation, _memory_users),
)}


def schedule_id(task: str) -> str:
    return f"{SCHEDULE}-{task}"


class Scheduler:
    """Keeps each enabled task's recurring job queued, and runs the jobs' two kinds
    (registered with the JobRunner through :meth:`handlers`)."""

    def __init__(self, store: Store, settings: Settings, now: Callable[[], float]) -> None:
        self.store = store
        self.settings = settings
        self.now = now
        self.runs = SweepLog()  # the recent runs, for the inspector

    def interval(self, task: str) -> float:
        """Seconds between runs of ``task``; 0 when it is off."""
        if task == "retention" and self.settings.retention_days <= 0:
            return 0.0
        return float(getattr(self.settings.maintenance, task, 0.0))

    def tick(self) -> list[str]:
        """Queue the recurring job of each enabled task that has none (due now), drop
        those of disabled tasks, bring forward one due later than its interval allows,
        and retry a dead one an interval after its last attempt. Returns the tasks
        queued."""
        now = self.now()
        queued = []
        for name in TASKS:
            interval = self.interval(name)
            job_id = schedule_id(name)
            found = self.store.get_job(job_id)
            if interval <= 0:
                if found is not None and found.state == "pending":
                    self.store.complete_job(job_id)
            elif found is None:
                if self.store.enqueue_job_once(job_id, SCHEDULE, {"task": name}, None, now):
                    queued.append(name)
            elif found.state == "dead":
                if found.updated_at + interval <= now:
                    self.store.retry_dead_jobs(now, job_id=job_id)
            elif found.job.run_after > now + interval:  # not claimed: it is not due
                self.store.reschedule_job(job_id, found.job.attempts, now + interval,
                                          found.job.payload, now)
        return queued

    def handlers(self) -> dict[str, Callable[[Job], bool | None]]:
        return {SCHEDULE: self._schedule, SWEEP: self._sweep}

    def _schedule(self, job: Job) -> bool | None:
        """One run of a task's recurring job; True: it is rescheduled, not done."""
        name = str(job.payload["task"])
        task = TASKS[name]
        interval = self.interval(name)
        if interval <= 0:
            log.info("%s: turned off; its schedule is dropped", name)
            return None
        store, now = self.store, self.now()
        after = {"task": name, "last_run": now}
        if task.users is None:
            run = self.runs.start(name, now, 1)
            counts = self._timed(run, lambda: task.run(store, self.settings, now, None))
            log.info("%s: %s", name, counts)
            store.reschedule_job(job.id, job.attempts, now + interval, after, now)
            return True
        with store.transaction():
            if not store.reschedule_job(job.id, job.attempts, now + interval, after, now):
                return True  # a later claim of this job (its lease ran out) runs it
            users = task.users(store)
            for user in users:
                store.enqueue_job_once(f"{SWEEP}-{name}-{user}", SWEEP, {"task": name},
                                       user, now)
        self.runs.start(name, now, len(users), per_user=True)
        log.info("%s: queued for %d users", name, len(users))
        return True

    def _timed(self, run: SweepRun, work: Callable[[], Counts]) -> Counts:
        """``work()``, its time, counts and error (re-raised) added to ``run``."""
        started = time.perf_counter()
        try:
            counts = work()
        except Exception as exc:
            self.runs.finished(run, time.perf_counter() - started, None, exc)
            raise
        if counts is not SKIPPED:
            self.runs.finished(run, time.perf_counter() - started, counts)
        return counts

    def _sweep(self, job: Job) -> None:
        """One user's sweep, applied once (see the module docstring)."""
        name, user = str(job.payload["task"]), job.user_id
        now = self.now()
        run = self.runs.latest(name, now)

        def sweep() -> Counts:
            with self.store.transaction():
                if not self.store.complete_job(job.id):
                    return SKIPPED
                return TASKS[name].run(self.store, self.settings, now, user)

        counts = self._timed(run, sweep)
        if counts is SKIPPED:
            return
        log.debug("%s for %s: %s", name, user, counts)
        if TASKS[name].scrub and isinstance(counts, dict) and counts.get("messages"):
            self.store.scrub()
