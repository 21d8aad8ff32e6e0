"""``memd migrate`` into a database a daemon has opened, and the record that makes
``memd serve`` refuse a target whose copy did not finish, even one that holds no row yet;
on a real SQLite source and a real PostgreSQL target."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pg
import psycopg
import pytest
from click.testing import CliRunner

import memd
from memd.backends.common.migrations import COPYING_KEY
from memd.cli import main
from memd.engine.background.schedule import SCHEDULE, schedule_id
from memd.errors import StorageError

PARTITIONS = (2, 2, 2)


def source(tmp_path: Path) -> Path:
    """A data dir whose daemon has run: memories, a session, and its scheduler's jobs."""
    with memd.open(tmp_path / "src", embedder="fake") as m:
        m.add("I deploy on Fridays", user_id="u")
        s = m.create_session("u")
        m.append(s.id, "u", [{"role": "user", "content": "my cat is called Miso"}])
        assert m.jobs.schedule.tick()  # what a daemon's first tick queues
    return tmp_path / "src" / "memd.db"


def schedule_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT job_id, run_after, created_at, payload::text FROM jobs "
                            "WHERE kind = %s ORDER BY job_id", (SCHEDULE,)).fetchall()


def migrate_json(db: Path, dsn: str) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["migrate", "--from", str(db), "--to", dsn,
                                    "--partitions", "2,2,2", "--json"])
    assert res.exit_code == 0, res.output
    report: dict[str, Any] = json.loads(res.stdout)
    return report


def test_migrate_into_a_database_a_daemon_has_opened(tmp_path: Path) -> None:
    db = source(tmp_path)
    dsn = pg.database()
    time.sleep(0.01)  # the target's scheduler rows are its own: other times than the source's
    with memd.open(tmp_path / "dst", embedder="fake", db=dsn, pg_partitions=PARTITIONS) as m:
        assert m.jobs.schedule.tick()  # memd serve's first tick
    own = schedule_rows(dsn)
    assert own and all(job_id.startswith(schedule_id("")) for job_id, *_ in own)

    report = migrate_json(db, dsn)
    assert report["matches"] is True
    jobs = report["tables"]["jobs"]
    assert jobs["kept_target_own"] == len(own)
    assert report["tables"]["memories"]["copied"] == 1
    assert schedule_rows(dsn) == own  # the target's scheduler rows, untouched
    again = migrate_json(db, dsn)  # a rerun finds nothing to copy and nothing to refuse
    assert again["copied"] == 0 and again["matches"] is True
    with memd.open(tmp_path / "dst", embedder="fake", db=dsn) as m:
        m.check_servable()
        assert [x.text for x in m.list("u")] == ["I deploy on Fridays"]


def test_a_target_never_served_gets_the_source_scheduler_rows(tmp_path: Path) -> None:
    db = source(tmp_path)
    dsn = pg.database()
    report = migrate_json(db, dsn)
    assert report["matches"] is True and report["tables"]["jobs"]["kept_target_own"] == 0
    with memd.open(tmp_path / "src", embedder="fake") as m:
        queued = [q.job.id for q in m.store.list_jobs("pending") if q.job.kind == SCHEDULE]
    assert [job_id for job_id, *_ in schedule_rows(dsn)] == sorted(queued) != []


def test_serve_refuses_the_empty_target_of_a_migrate_killed_before_its_first_row(
    tmp_path: Path,
) -> None:
    db = source(tmp_path)
    dsn = pg.database()  # empty: the run makes the schema, the slow part, first
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.cli", "migrate", "--from", str(db), "--to", dsn,
         "--partitions", "64,64,64"],
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    pg.kill_when(proc, dsn, "SELECT 1 FROM schema_meta WHERE key = %s", (COPYING_KEY,))
    assert proc.returncode == -signal.SIGKILL
    with psycopg.connect(dsn, autocommit=True) as conn, \
            contextlib.suppress(psycopg.errors.UndefinedTable):  # no row copied
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)

    args = ["serve", "--data-dir", str(tmp_path / "d"), "--db", dsn, "--port", "1"]
    result = CliRunner().invoke(main, args, env={"MEMD_EMBEDDER": "fake"})
    assert result.exit_code == 1, result.output
    assert "memd migrate into this database did not finish" in result.output
    assert "memories" in result.output and "run the same memd migrate again" in result.output

    report = migrate_json(db, dsn)  # the rerun finishes it: served again
    assert report["matches"] is True and report["tables"]["memories"]["copied"] == 1
    with memd.open(tmp_path / "d", embedder="fake", db=dsn) as m:
        m.check_servable()


def test_a_refused_migrate_leaves_a_served_database_servable(tmp_path: Path) -> None:
    db = source(tmp_path)
    dsn = pg.database()
    assert migrate_json(db, dsn)["matches"] is True
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memories SET content_text = 'tampered'")
    res = CliRunner().invoke(main, ["migrate", "--from", str(db), "--to", dsn])
    assert res.exit_code == 1 and "different data for 1 row(s)" in res.stderr
    with memd.open(tmp_path / "d", embedder="fake", db=dsn) as m:
        m.check_servable()  # nothing was written, the record of a copy under way neither


def test_serve_checks_the_record(tmp_path: Path) -> None:
    dsn = pg.database()
    with memd.open(tmp_path / "d", embedder="fake", db=dsn, pg_partitions=PARTITIONS) as m:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_meta (key, value) VALUES (%s, %s)",
                         (COPYING_KEY, "messages,memories"))
        assert m.store.unfinished_copy() == ["memories", "messages"]
        with pytest.raises(StorageError, match="did not finish"):
            m.check_servable()
