"""Background jobs that survive anything: a handler that raises, a worker killed between
a job's effect and its completion, a daemon killed with SIGKILL mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from clock import Clock
from fastapi.testclient import TestClient
from servers import free_port, wait_healthy

import memd
from memd.cli import main
from memd.engine.background.jobs import MAX_ATTEMPTS
from memd.engine.learning.write import content_hash
from memd.engine.memory import Memd
from memd.server.app import JobWorker, create_app
from memd.types import Job, Provenance, Tier

MEMD = [sys.executable, "-m", "memd.cli"]



@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def m(tmp_path: Path, clock: Clock) -> Any:
    engine = memd.open(tmp_path / "d", clock=clock)
    yield engine
    engine.close()


def ingest_payload(user: str, text: str) -> dict[str, Any]:
    return {"user_id": user, "text": text, "workspace": None, "session_id": None,
            "tier": int(Tier.SEMANTIC), "provenance": int(Provenance.SYSTEM_INFERRED),
            "confidence": 0.8, "importance": 0.5, "tags": [], "entities": []}


def boom(job: Job) -> None:
    raise RuntimeError("the handler broke")


def run_until_settled(m: Memd, clock: Clock) -> None:
    """Run jobs, jumping the clock past each backoff, until none is pending."""
    for _ in range(4 * MAX_ATTEMPTS):
        m.run_jobs()
        if not m.store.pending_jobs():
            return
        clock.t += 3600
    raise AssertionError("jobs still pending")


def test_a_raising_handler_does_not_stop_the_others_and_ends_dead(
        m: Memd, clock: Clock, tmp_path: Path) -> None:
    m.jobs.handlers["broken"] = boom
    bad = m.store.enqueue_job("broken", {}, "alice", clock())
    mem = m.add("alice likes green tea", "alice").memory
    m.store.enqueue_job("access", {"hits": [[mem.id, 1.0, 1]]}, "alice", clock())
    run_until_settled(m, clock)
    assert m.get(mem.id, "alice").access_count == 2  # the good job ran, at once
    (dead,) = m.jobs.listed("dead")
    assert (dead.job.id, dead.job.attempts) == (bad, MAX_ATTEMPTS)
    assert dead.job.last_error == "RuntimeError: the handler broke"

    with TestClient(create_app(m, run_jobs=False), base_url="http://127.0.0.1") as c:
        listed = c.get("/v1/jobs", params={"state": "dead"}).json()["data"]
        assert [(j["id"], j["kind"], j["user_id"], j["attempts"]) for j in listed] == [
            (bad, "broken", "alice", MAX_ATTEMPTS)]
        assert listed[0]["last_error"] == "RuntimeError: the handler broke"
        assert c.get("/v1/jobs", params={"state": "dead", "user_id": "bob"}).json()[
            "data"] == []
        assert c.post(f"/v1/jobs/{bad}/retry", headers={"X-Memd-User": "bob"}
                      ).status_code == 404  # another user's job
        assert c.post("/v1/jobs/nope/retry").status_code == 404
        assert c.get("/v1/jobs", params={"state": "gone"}).status_code == 422
        retried = c.post(f"/v1/jobs/{bad}/retry")
        assert retried.status_code == 200
        assert (retried.json()["state"], retried.json()["attempts"]) == ("pending", 0)
        assert c.post(f"/v1/jobs/{bad}/retry").status_code == 409  # pending, not dead
        (pending,) = c.get("/v1/jobs").json()["data"]
        assert pending["id"] == bad
    m.jobs.handlers["broken"] = lambda job: None  # fixed: the retried job now completes
    m.run_jobs()
    assert m.store.pending_jobs() == 0 and m.jobs.listed("dead") == []


def test_the_cli_lists_and_retries_dead_jobs(tmp_path: Path, clock: Clock) -> None:
    data = tmp_path / "d"
    with memd.open(data, clock=clock) as m:
        job = m.store.enqueue_job("no-such-kind", {}, "alice", clock())
        run_until_settled(m, clock)
    runner = CliRunner()
    listed = runner.invoke(main, ["--data-dir", str(data), "jobs", "--dead", "--json"])
    assert listed.exit_code == 0, listed.output
    (dead,) = json.loads(listed.output)
    assert (dead["id"], dead["state"], dead["attempts"]) == (job, "dead", MAX_ATTEMPTS)
    assert "KeyError" in dead["last_error"]
    human = runner.invoke(main, ["--data-dir", str(data), "jobs", "--dead"])
    assert job in human.output and "no-such-kind" in human.output
    retried = runner.invoke(main, ["--data-dir", str(data), "jobs", "--retry", job])
    assert retried.exit_code == 0 and f"retried {job}" in retried.output
    again = runner.invoke(main, ["--data-dir", str(data), "jobs", "--retry", job])
    assert again.exit_code != 0  # pending now, not dead
    pending = runner.invoke(main, ["--data-dir", str(data), "jobs", "--json"])
    assert [j["id"] for j in json.loads(pending.output)] == [job]
    assert runner.invoke(main, ["--data-dir", str(data), "jobs", "--dead"]
                         ).output.strip() == "no dead jobs"


def test_the_worker_thread_survives_errors_outside_the_handlers(m: Memd) -> None:
    calls: list[int] = []

    def flaky(limit: int = 1000) -> int:
        calls.append(limit)
        if len(calls) == 1:
            raise RuntimeError("claim failed")  # not a MemdError: a bug outside a handler
        return 0

    m.run_jobs = flaky  # type: ignore[method-assign]
    worker = JobWorker(m, interval=0.01)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3  # it went on after the error
    finally:
        worker.stop()


def _crash_after_effect(m: Memd, clock: Clock) -> None:
    """Run the due jobs' handlers as a worker that dies before recording completion
    would: claim, run, and never call complete_job; then let the lease run out."""
    for job in m.store.claim_jobs(clock(), 100):
        m.jobs.handlers[job.kind](job)
    clock.t += 120  # past the lease


def test_a_rerun_ingest_job_adds_no_memory_and_no_access(m: Memd, clock: Clock) -> None:
    m.store.enqueue_job("ingest", ingest_payload("alice", "alice keeps bees"), "alice",
                        clock())
    _crash_after_effect(m, clock)
    m.run_jobs()  # the job comes back after its lease: this run must change nothing
    (mem,) = m.store.iter_memories("alice")
    assert mem.content_hash == content_hash("alice keeps bees") and mem.access_count == 1
    assert m.store.pending_jobs() == 0 and m.jobs.listed("dead") == []


def test_a_rerun_access_job_counts_once(m: Memd, clock: Clock) -> None:
    mem = m.add("alice plays the oboe", "alice").memory
    m.store.enqueue_job("access", {"hits": [[mem.id, 0.5, 3]]}, "alice", clock())
    _crash_after_effect(m, clock)
    m.run_jobs()
    assert m.get(mem.id, "alice").access_count == 1 + 3
    assert m.store.pending_jobs() == 0


def test_embed_messages_is_idempotent(m: Memd, clock: Clock) -> None:
    session = m.create_session("alice")
    (msg,) = m.append(session.id, "alice", [{"role": "user", "content": "hello there"}])
    _crash_after_effect(m, clock)
    m.run_jobs()
    assert m.store.pending_jobs() == 0 and m.jobs.listed("dead") == []
    assert [x.id for x in m.messages(session.id, "alice")] == [msg.id]


# -- a real daemon, killed ------------------------------------------------------------
@pytest.mark.slow
def test_a_daemon_killed_mid_run_finishes_every_job_once(tmp_path: Path) -> None:

    data = tmp_path / "data"
    texts = [f"alice noted item {i}: the {i}th crate holds {i * 7} apples" for i in range(50)]
    with memd.open(data) as m:
        target = m.add("alice counts crates", "alice").memory
        for text in texts:
            m.store.enqueue_job("ingest", ingest_payload("alice", text), "alice", m.now())
            m.store.enqueue_job("access", {"hits": [[target.id, 1.0, 1]]}, "alice", m.now())
        assert m.store.pending_jobs() == 100
    env = {**os.environ, "MEMD_DATA_DIR": str(data), "MEMD_EMBEDDER": "fake"}

    def start() -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        proc = subprocess.Popen([*MEMD, "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return proc, port

    import apsw

    proc, port = start()
    try:
        # Watch the queue drain from outside and kill the daemon in the middle of it.
        watch = apsw.Connection(str(data / "memd.db"), flags=apsw.SQLITE_OPEN_READONLY)
        deadline = time.monotonic() + 60
        left = 100
        while time.monotonic() < deadline:
            left = watch.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
            if left < 100:
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        left = watch.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
        watch.close()
        assert 0 < left < 100, f"not killed mid-run ({left} jobs left)"
    finally:
        if proc.poll() is None:
            proc.kill()

    proc, port = start()
    try:
        wait_healthy(port, proc)
        deadline = time.monotonic() + 150  # jobs claimed by the killed daemon: one lease
        while time.monotonic() < deadline:
            if httpx.get(f"http://127.0.0.1:{port}/health").json()["pending_jobs"] == 0:
                break
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["pending_jobs"] == 0
        dead = httpx.get(f"http://127.0.0.1:{port}/v1/jobs", params={"state": "dead"})
        assert dead.json()["data"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)

    with memd.open(data) as m:
        hashes = [x.content_hash for x in m.store.iter_memories("alice")]
        assert len(hashes) == len(set(hashes)) == 51  # every ingest once, none twice
        assert {content_hash(t) for t in texts} <= set(hashes)
        assert m.get(target.id, "alice").access_count == 1 + 50
