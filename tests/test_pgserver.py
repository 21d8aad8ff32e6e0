"""The trial PostgreSQL of ``memd postgres start``: what it is started with."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from memd import pgserver

pytestmark = pytest.mark.slow


def test_the_trial_server_keeps_little_write_ahead_log(tmp_path: Path) -> None:
    """PostgreSQL's default keeps up to 1 GB of WAL; creating memd's partitioned schema
    alone fills hundreds of MB of it, which a trial server need not keep."""
    started = pgserver.start(tmp_path)
    try:
        assert started.dsn is not None
        with psycopg.connect(started.dsn) as conn:
            shown = {name: conn.execute(f"SHOW {name}").fetchone()
                     for name in ("max_wal_size", "min_wal_size")}
        assert shown == {"max_wal_size": ("128MB",), "min_wal_size": ("32MB",)}
    finally:
        pgserver.stop(tmp_path)
