"""The scheduler's recent sweeps (memd.engine.background.sweeps): what each run did, as
the engine records it and ``GET /v1/sweeps`` serves it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from clock import Clock
from fastapi.testclient import TestClient
from servers import user_with_key

import memd
from memd.config import Maintenance
from memd.engine.background import schedule
from memd.engine.memory import Memd
from memd.server.app import create_app

T0 = 1_700_000_000.0
ONLY = Maintenance(tick=60.0, expiry=100.0, promotion=50.0, demotion=0.0, decay=0.0,
                   prune=0.0, retention=0.0, partitions=0.0, compaction=0.0,
                   consolidation=0.0)


@pytest.fixture
def m(tmp_path: Path) -> Iterator[Memd]:
    with memd.open(tmp_path / "d", embedder="fake", clock=Clock(T0),
                   maintenance=ONLY) as engine:
        yield engine


def _sweep(m: Memd) -> None:
    m.jobs.schedule.tick()
    while m.run_jobs():
        pass


def test_each_run_records_its_jobs_time_and_counts(m: Memd) -> None:
    for user in ("alice", "bob"):
        m.add(f"{user} keeps notes", user, expires_at=T0 - 1)
    _sweep(m)
    runs = {r.task: r for r in m.jobs.schedule.runs.recent()}
    assert set(runs) == {"expiry", "promotion"}
    expiry = runs["expiry"]
    assert (expiry.started_at, expiry.jobs, expiry.done, expiry.errors) == (T0, 1, 1, [])
    assert expiry.counts["memories"] == 2 and expiry.seconds > 0
    promotion = runs["promotion"]  # fanned out: one job per user with memories
    assert (promotion.jobs, promotion.done, promotion.per_user) == (2, 2, True)
    assert not expiry.per_user


def test_a_failing_sweep_records_its_error(m: Memd, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> object:
        raise RuntimeError("the disk is full")

    monkeypatch.setitem(schedule.TASKS, "expiry",
                        replace(schedule.TASKS["expiry"], run=broken))
    _sweep(m)
    [run] = [r for r in m.jobs.schedule.runs.recent() if r.task == "expiry"]
    assert run.errors == ["RuntimeError: the disk is full"] and run.done == 1
    [dead] = [q for q in m.store.list_jobs("pending") + m.store.list_jobs("dead")
              if q.job.id == schedule.schedule_id("expiry")]
    assert "the disk is full" in (dead.job.last_error or "")  # the queue still knows


def test_the_api_serves_them_newest_first(m: Memd) -> None:
    m.add("a note", "alice")
    _sweep(m)
    m.jobs.schedule.runs.start("decay", T0 + 5, 3)
    with TestClient(create_app(m, run_jobs=False), base_url="http://127.0.0.1") as c:
        got = c.get("/v1/sweeps")
        assert got.status_code == 200, got.text
        data = got.json()["data"]
        assert data[0] == {"task": "decay", "started_at": T0 + 5, "jobs": 3, "per_user": False,
                           "done": 0,
                           "seconds": 0.0, "counts": {}, "failed": 0, "errors": []}
        assert {r["task"] for r in data[1:]} == {"expiry", "promotion"}
        assert len(c.get("/v1/sweeps?limit=1").json()["data"]) == 1
        assert c.get("/v1/sweeps?limit=0").status_code in (400, 422)


def test_team_mode_leaves_out_what_spans_every_user(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake", clock=Clock(T0), maintenance=ONLY,
                   auth=True) as m:
        key = user_with_key(m, "alice")
        m.add("a note", "alice", expires_at=T0 - 1)
        _sweep(m)
        m.jobs.schedule.runs.finished(m.jobs.schedule.runs.latest("expiry", T0), 0.1, None,
                                      RuntimeError("bob's row 12 is broken"))
        with TestClient(create_app(m, run_jobs=False), base_url="http://127.0.0.1") as c:
            assert c.get("/v1/sweeps").status_code == 401
            data = c.get("/v1/sweeps", headers={"Authorization": f"Bearer {key}"}).json()
        [expiry] = [r for r in data["data"] if r["task"] == "expiry"]
        assert (expiry["counts"], expiry["errors"], expiry["failed"]) == ({}, [], 1)


def test_a_sweep_another_claim_completed_is_not_counted(m: Memd) -> None:
    m.add("a note", "alice")
    m.jobs.schedule.tick()
    for job in m.store.claim_jobs(T0, 100):  # the schedule's jobs: they fan out
        m.jobs.handlers[job.kind](job)
    [sweep] = [j for j in m.store.claim_jobs(T0, 100) if j.kind == "sweep"]
    m.store.complete_job(sweep.id)  # as a worker whose lease ran out did
    m.jobs.handlers["sweep"](sweep)
    [promotion] = [r for r in m.jobs.schedule.runs.recent() if r.task == "promotion"]
    assert (promotion.jobs, promotion.done) == (1, 0)
