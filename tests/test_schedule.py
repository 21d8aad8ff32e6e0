"""The scheduler (memd.engine.background.schedule): recurring sweeps as durable jobs, driven by a
fake clock, on real SQLite and PostgreSQL; and a daemon left running sweeps on its own."""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clock import Clock
from fastapi.testclient import TestClient

import memd
from memd.config import Maintenance
from memd.engine.background.schedule import TASKS, schedule_id
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.types import SessionStatus, Tier

HOUR = 3600.0
DAY = 24 * HOUR
T0 = 1_700_000_000.0
SHORT = Maintenance(tick=60.0, expiry=100.0, promotion=50.0, demotion=100.0, decay=100.0,
                    prune=100.0, retention=100.0, partitions=100.0, compaction=100.0,
                    consolidation=100.0)



@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


def _open(tmp_path: Path, clock: Clock, backend: str = "sqlite", **overrides: Any) -> Memd:
    overrides.setdefault("maintenance", SHORT)
    if backend == "postgres":
        from servers import postgres_url

        overrides.update(db=postgres_url(), pg_partitions=(4, 4, 4))
    return memd.open(tmp_path / "d", embedder="fake", clock=clock, **overrides)


@pytest.fixture
def m(tmp_path: Path, clock: Clock) -> Iterator[Memd]:
    with _open(tmp_path, clock) as engine:
        yield engine


def _drain(m: Memd) -> int:
    ran = 0
    while n := m.run_jobs():
        ran += n
    return ran


def _run_after(m: Memd, task: str) -> float | None:
    found = m.store.get_job(schedule_id(task))
    return None if found is None else found.job.run_after


def test_tasks_queue_once_and_run_when_due_not_before(m: Memd, clock: Clock) -> None:
    queued = m.jobs.schedule.tick()
    # retention is off without retention_days; every other task is queued, due now
    assert sorted(queued) == sorted(set(TASKS) - {"retention"})
    assert m.jobs.schedule.tick() == []  # a queued task is not queued twice
    assert all(_run_after(m, t) == T0 for t in queued)
    _drain(m)
    # each ran once and is back in the queue, one interval later, its last run noted
    assert _run_after(m, "promotion") == T0 + 50 and _run_after(m, "expiry") == T0 + 100
    found = m.store.get_job(schedule_id("promotion"))
    assert found is not None and found.job.payload == {"task": "promotion", "last_run": T0}
    clock.t = T0 + 49
    assert _drain(m) == 0 and _run_after(m, "promotion") == T0 + 50
    clock.t = T0 + 50
    assert _drain(m) == 1 and _run_after(m, "promotion") == T0 + 100  # promotion alone
    assert _run_after(m, "expiry") == T0 + 100


def test_a_restart_reruns_nothing_and_intervals_follow_the_settings(
    tmp_path: Path, clock: Clock
) -> None:
    with _open(tmp_path, clock) as first:
        first.jobs.schedule.tick()
        _drain(first)
    clock.t = T0 + 10
    shorter = Maintenance(promotion=20.0, expiry=100.0, demotion=0.0, decay=100.0,
                          prune=100.0, partitions=100.0)
    with _open(tmp_path, clock, maintenance=shorter) as again:
        assert again.jobs.schedule.tick() == []
        assert _drain(again) == 0  # nothing due: the restart re-ran nothing
        assert _run_after(again, "promotion") == T0 + 30  # brought forward: now + 20
        assert _run_after(again, "expiry") == T0 + 100
        assert again.store.get_job(schedule_id("demotion")) is None  # 0: dropped


def test_zero_turns_a_task_off(tmp_path: Path, clock: Clock) -> None:
    off = Maintenance(tick=1.0, expiry=0.0, promotion=0.0, demotion=0.0, decay=0.0,
                      prune=0.0, retention=0.0, partitions=0.0, compaction=0.0,
                      consolidation=0.0)
    with _open(tmp_path, clock, maintenance=off, retention_days=30) as m:
        assert m.jobs.schedule.tick() == []
        assert m.store.list_jobs("pending") == []


def test_user_sweeps_run_once_per_user_in_their_own_jobs(m: Memd, clock: Clock) -> None:
    ids = {}
    for user in ("alice", "bob"):
        mem = m.add(f"{user} prefers pytest fixtures", user, tier="L1").memory
        m.store.record_access(user, [(mem.id, 0.9)] * 3, T0)
        ids[user] = mem.id
    clock.t = T0 + HOUR
    m.jobs.schedule.tick()
    for job in m.store.claim_jobs(clock.t, 100):  # the schedule's jobs, run by hand
        assert job.kind == "schedule"
        m.jobs.handlers[job.kind](job)
    sweeps = [q.job for q in m.store.list_jobs("pending") if q.job.kind == "sweep"]
    assert {(j.user_id, j.payload["task"]) for j in sweeps} >= {
        ("alice", "promotion"), ("bob", "promotion")}
    _drain(m)
    assert all(m.get(i, u).tier == Tier.EPISODIC for u, i in ids.items())
    assert not [q for q in m.store.list_jobs("pending") if q.job.kind == "sweep"]


def test_a_session_in_use_does_not_expire(tmp_path: Path, clock: Clock, backend: str) -> None:
    with _open(tmp_path, clock, backend, session_ttl_hours=1.0) as m:
        used, idle = m.create_session("alice"), m.create_session("alice")
        for minutes in (20, 40, 60, 80):
            clock.t = T0 + minutes * 60
            m.append(used.id, "alice", [{"role": "user", "content": f"step {minutes}"}])
        clock.t = T0 + 90 * 60
        m.jobs.schedule.tick()
        _drain(m)
        assert m.session(idle.id, "alice").status == SessionStatus.EXPIRED
        got = m.session(used.id, "alice")
        assert got.status == SessionStatus.ACTIVE
        assert got.expires_at == pytest.approx(T0 + 80 * 60 + HOUR)


def test_retention_deletes_exactly_the_inactive_sessions_messages(
    tmp_path: Path, clock: Clock, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    with _open(tmp_path, clock, backend, retention_days=30) as m:
        old, active = m.create_session("alice"), m.create_session("alice")
        bobs = m.create_session("bob")
        m.append(old.id, "alice", [{"role": "user", "content": "the zanzibar itinerary"},
                                   {"role": "assistant", "content": "zanzibar noted, Quetzalfig"}])
        m.append(bobs.id, "bob", [{"role": "user", "content": "zanzibar for bob"}])
        m.append(active.id, "alice", [{"role": "user", "content": "the zanzibar budget"}])
        kept = m.add("alice is planning a trip to zanzibar", "alice").memory
        clock.t = T0 + 20 * DAY
        m.append(active.id, "alice", [{"role": "user", "content": "still planning"}])
        _drain(m)  # the messages' vectors
        old_ids = {x.id for x in m.messages(old.id, "alice")}
        version = m.session(old.id, "alice").history_version
        clock.t = T0 + 31 * DAY
        caplog.set_level(logging.INFO, logger="memd.engine.background.maintenance")
        m.jobs.schedule.tick()
        _drain(m)
        assert m.messages(old.id, "alice") == [] and m.messages(bobs.id, "bob") == []
        assert [x.content for x in m.messages(active.id, "alice")] == [
            "the zanzibar budget", "still planning"]
        assert m.session(old.id, "alice").history_version > version  # the session stays
        assert m.get(kept.id, "alice").is_active  # memories persist
        hits = m.store.keyword_messages("alice", "zanzibar", 10)
        assert [x.content for x, _ in hits] == ["the zanzibar budget"]
        vector = m.embedder.embed(["the zanzibar itinerary"])[0]
        assert not {x.id for x, _ in m.store.nearest_messages("alice", vector, 10)} & old_ids
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retention")]
        assert sorted(said) == [
            "retention: deleted 1 messages of 1 sessions inactive for 30 days",
            "retention: deleted 2 messages of 1 sessions inactive for 30 days"]
        assert not any("zanzibar" in r.getMessage() for r in caplog.records)
        if backend == "sqlite":  # the sweep scrubbed the files: no deleted text is left
            for f in (tmp_path / "d").rglob("memd.db*"):
                assert b"Quetzalfig" not in f.read_bytes(), f


def test_postgres_gets_next_months_partitions_from_the_schedule(
    tmp_path: Path, clock: Clock
) -> None:
    import psycopg

    clock.t = float(calendar.timegm((2031, 1, 31, 23, 0, 0)))
    with _open(tmp_path, clock, "postgres") as m:
        dsn = m.settings.db

        def exists(name: str) -> bool:
            with psycopg.connect(dsn) as conn:
                row = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
            return row is not None and row[0] is not None

        assert not exists("messages_p000_203102")
        m.jobs.schedule.tick()
        _drain(m)
        assert exists("messages_p000_203102") and exists("messages_p003_203103")


def test_a_daemon_left_running_sweeps_on_its_own(tmp_path: Path) -> None:
    fast = Maintenance(tick=0.05, expiry=0.1, promotion=0.1, demotion=0.0, decay=0.0,
                       prune=0.0, partitions=0.0)
    engine = memd.open(tmp_path / "d", embedder="fake", maintenance=fast, job_interval=0.05)
    try:
        note = engine.add("a note for the next hour", "alice",
                          expires_at=time.time() + 0.3).memory
        with TestClient(create_app(engine), base_url="http://127.0.0.1"):
            deadline = time.monotonic() + 10
            while engine.get(note.id, "alice").is_active and time.monotonic() < deadline:
                time.sleep(0.05)
        assert not engine.get(note.id, "alice").is_active
    finally:
        engine.close()


def test_the_compaction_and_consolidation_sweeps_queue_their_jobs(
    tmp_path: Path, clock: Clock
) -> None:
    """An append queues its session's compaction; the sweep catches a session past its
    threshold whose job is not queued (here: dropped), and queues each user's
    consolidation."""
    with _open(tmp_path, clock, compact_every_turns=4, compact_keep_turns=2) as m:
        long, short = m.create_session("alice"), m.create_session("alice")
        for i in range(5):
            m.append(long.id, "alice", [{"role": "user", "content": f"step {i} done"},
                                        {"role": "assistant", "content": "ok"}])
        m.append(short.id, "alice", [{"role": "user", "content": "hello"}])
        m.add("alice likes tea", "alice")
        queued = m.store.get_job(f"compact-alice-{long.id}")
        assert queued is not None  # the append's own
        with m.store.transaction():
            m.store.complete_job(queued.job.id)
        m.jobs.schedule.tick()
        for task in ("compaction", "consolidation"):  # just these: the others' jobs wait
            job = m.store.get_job(schedule_id(task))
            assert job is not None
            m.jobs.schedule.handlers()["schedule"](job.job)
        sweeps = {q.job.id: q.job for q in m.store.list_jobs("pending")
                  if q.job.kind == "sweep"}
        for job in sweeps.values():
            m.jobs.schedule.handlers()["sweep"](job)
        kinds = sorted(q.job.id for q in m.store.list_jobs("pending", "alice")
                       if q.job.kind in ("compact", "consolidate"))
        assert kinds == ["compact-alice-" + long.id, "consolidate-alice"]
