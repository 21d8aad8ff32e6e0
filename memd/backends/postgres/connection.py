"""The PostgreSQL store's connections: psycopg 3 (sync) over ``psycopg_pool`` pools, each
pooled connection prepared in one place (pgvector's types registered, iterative HNSW
scans). A transaction belongs to one thread: the connection of the current ``with
store.transaction():`` is kept in a thread-local, and inner blocks (and every writing
method called inside one) run in a savepoint, so a failed write, e.g. a Conflict the
caller handles, undoes only itself and the outer transaction goes on, as on SQLite. The
two writes of every turn, ``append_messages`` and ``enqueue_job``, cannot raise a
Conflict and skip the savepoint; should one fail all the same, the transaction raises
when it ends rather than let psycopg's COMMIT silently roll it back. Driver errors leave
as memd errors (:mod:`memd.backends.common.errors`): IntegrityError -> Conflict,
DataError -> InvalidInput (values PostgreSQL cannot store, such as NUL characters),
anything else -> StorageError.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb, set_json_loads
from psycopg_pool import ConnectionPool

from memd.auth import current_actor
from memd.backends.common.connection import SqlConnection
from memd.backends.common.dialect import POSTGRES
from memd.backends.common.errors import translate
from memd.backends.common.rows import load_json_bytes, row_mappers
from memd.backends.postgres.schema import (
    HISTORY_MONTHS,
    Conn,
    add_history_months,
    migrate,
    month,
)
from memd.backends.postgres.scrub import deep_scrub
from memd.errors import MemdError, StorageError

Params = Sequence[Any] | Mapping[str, Any]
_INERROR = TransactionStatus.INERROR
_IDLE = TransactionStatus.IDLE
_PLAN_MODE = "SELECT set_config('plan_cache_mode', %s, true)"
# HNSW's candidate list (pgvector's default is 40): at least the memory candidates' KNN
# limit (50), since a scan whose list is shorter than its LIMIT goes on iteratively past
# the first pass; bench/README.md has the recall and latency at each setting.
_EF_SEARCH = 64

driver_error: functools.partial[MemdError] = functools.partial(
    translate, database="PostgreSQL", conflict=psycopg.IntegrityError,
    invalid=psycopg.DataError, unavailable=psycopg.OperationalError)  # PoolTimeout too
# psycopg hands JSON over undecoded (_undecoded); the row mappers decode it.
MAP = row_mappers(load_json_bytes, tuple)


def _undecoded(data: str | bytes) -> str | bytes:
    return data


def _rolled_back() -> StorageError:
    """psycopg's COMMIT of a transaction an error aborted is a silent ROLLBACK: a caller
    that caught the error must not think its other writes were kept."""
    return StorageError("the transaction was rolled back: a statement in it failed and the "
                        "error was caught inside it")


class PostgresConnection(SqlConnection):
    """The pools, transactions and row-level security of a PostgreSQL store."""

    dialect = POSTGRES
    map = MAP
    json = Jsonb
    concurrent_reads = True  # a pooled connection per thread
    concurrent_writes = True

    def __init__(
        self, dsn: str, dim: int = 384, partitions: tuple[int, int, int] = (256, 256, 512),
        *, pool_size: int = 8, side_pool_size: int = 4, connect_timeout: float = 2.0,
    ) -> None:
        self.dim = dim
        self.partitions = partitions
        self._local = threading.local()
        self._history_month = (0, 0)
        # A database out of reach must cost a request seconds, not the pool's default
        # half minute: libpq's connect_timeout bounds each attempt to connect (whole
        # seconds, at least 2), the pools' timeout the wait for a connection.
        self.connect_timeout = connect_timeout
        libpq_timeout = max(2, math.ceil(connect_timeout))
        connect: dict[str, Any] = {"autocommit": True, "connect_timeout": libpq_timeout}
        try:
            with psycopg.connect(dsn, connect_timeout=libpq_timeout) as conn:
                self.database = str(conn.info.dbname)
                self.partitions = migrate(conn, dim, partitions, f"database {self.database!r}")
                now = time.time()
                add_history_months(conn, now, HISTORY_MONTHS)
                self._history_month = month(now)
        except psycopg.Error as exc:
            raise StorageError(f"cannot open the PostgreSQL store: {exc}") from exc
        # Autocommit connections: a read outside a transaction is its one statement, one
        # round trip (an implicit transaction would add a BEGIN and a COMMIT); every
        # write block opens its transaction explicitly (conn.transaction()).
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            dsn, min_size=1, max_size=pool_size, configure=self._configure, open=False,
            name="memd", kwargs=connect, timeout=connect_timeout,
        )
        # The engine's worker threads (side_reads) read from a pool of their own: a
        # request thread may hold a connection of the main pool (a read batch) while it
        # waits for its worker, so a worker waiting on the main pool could wait for ever
        # once every request thread holds one.
        self._side_pool: ConnectionPool[Conn] = ConnectionPool(
            dsn, min_size=1, max_size=side_pool_size, configure=self._configure,
            open=False, name="memd-side", kwargs=connect, timeout=connect_timeout,
        )
        # Statements over one user's own partitions (Tables.own), prepared on first use
        # and run with their generic plan: no planning per call.
        self._own_pool: ConnectionPool[Conn] = ConnectionPool(
            dsn, min_size=min(2, side_pool_size), max_size=pool_size + side_pool_size,
            configure=self._configure_own, open=False, name="memd-own", kwargs=connect,
            timeout=connect_timeout,
        )
        # The memory candidates' keyword channel over a user's own partitions, outside
        # row-level security, runs here (_side_rows) while the request's thread runs the
        # other channels: the server ranks the keyword matches while it runs the KNN.
        self.side_workers = ThreadPoolExecutor(max_workers=max(2, pool_size),
                                                thread_name_prefix="memd-keyword")
        try:
            self._pool.open(wait=True, timeout=30.0)
            self._side_pool.open()
            self._own_pool.open()
        except psycopg.Error as exc:
            self.close()
            raise StorageError(f"cannot open a PostgreSQL connection pool: {exc}") from exc

    @staticmethod
    def _configure(conn: Conn) -> None:
        """Prepare a new pooled connection: pgvector types, JSON left for the row mappers,
        strict iterative HNSW scans with a candidate list of _EF_SEARCH."""
        register_vector(conn)
        set_json_loads(_undecoded, conn)
        conn.execute("SET hnsw.iterative_scan = strict_order")
        conn.execute(f"SET hnsw.ef_search = {_EF_SEARCH}")
        # psycopg prepares a statement after 5 runs; PostgreSQL's generic plan for it
        # would then lock every partition of the production layout (512 history hash
        # partitions x their months, plus indexes), exhausting max_locks_per_transaction.
        # Custom plans prune to the user's partition at plan time.
        conn.execute("SET plan_cache_mode = force_custom_plan")

    @classmethod
    def _configure_own(cls, conn: Conn) -> None:
        """A connection of the pool for statements over one user's own partitions: every
        statement is prepared at its first run and planned once, generically (it names a
        few tables, so the generic plan locks only them), which saves planning each
        call. Nothing else may run here: a generic plan of a statement over a parent, or
        of one inside a function that reads a parent, locks every partition of the
        layout."""
        cls._configure(conn)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.prepare_threshold = 0

    def close(self) -> None:
        self.side_workers.shutdown(wait=True)
        self._pool.close()
        self._side_pool.close()
        self._own_pool.close()

    @contextmanager
    def side_reads(self) -> Iterator[None]:
        self._local.side = True
        try:
            yield
        finally:
            self._local.side = False

    def _pool_of_thread(self) -> ConnectionPool[Conn]:
        return self._side_pool if getattr(self._local, "side", False) else self._pool

    def current(self) -> Conn | None:
        conn: Conn | None = getattr(self._local, "conn", None)
        return conn

    @contextmanager
    def txn(self, savepoint: bool = True, *, async_commit: bool = False) -> Iterator[Conn]:
        """A connection in a transaction: a savepoint in the thread's current transaction,
        or a pooled connection in a new one that commits at the end of the block.

        ``savepoint=False`` is for writes no caller handles a failure of (no Conflict can
        come out of them): they join the current transaction as they are and save the
        SAVEPOINT and RELEASE round trips. If one fails, the transaction is aborted,
        and leaving it then raises (below) rather than commit what came before.
        ``async_commit``: a new transaction commits without waiting for the WAL flush."""
        conn = self.current()
        try:
            if conn is not None:
                if conn.info.transaction_status == _IDLE:  # a read batch's connection
                    with self._own_txn(conn, async_commit=True):
                        yield conn
                    return
                if not savepoint or getattr(self._local, "batch", False):
                    yield conn  # a failure fails the whole transaction (or read batch)
                    return
                with conn.transaction():
                    yield conn
                return
            with self._pool_of_thread().connection() as conn:
                self._local.conn = conn
                try:
                    with self._own_txn(conn, async_commit):
                        yield conn
                finally:
                    self._local.conn = None
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    @contextmanager
    def _own_txn(self, conn: Conn, async_commit: bool) -> Iterator[None]:
        """A transaction of ``conn``'s own, as the acting user (_act_as_user); leaving it after a
        statement in it failed raises instead of committing what came before."""
        with conn.transaction():
            self._act_as_user(conn, async_commit)
            yield
            if conn.info.transaction_status == _INERROR:
                raise _rolled_back()

    @contextmanager
    def _read(self) -> Iterator[Conn]:
        """A connection for reading: the thread's (a transaction's or a read batch's),
        else a pooled one."""
        conn = self.current()
        try:
            if conn is not None:
                yield conn
                return
            with self._pool_of_thread().connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    @staticmethod
    def _act_as_user(conn: Conn, async_commit: bool = False, generic: bool = False) -> None:
        """Row-Level Security: in a request authenticated as a user, the transaction runs
        as the unprivileged ``memd_app`` role with ``memd.user_id`` set to that user, so
        the policies of sql/postgres/003_auth.sql bind every query in it (both settings
        are transaction-local and vanish when the pooled connection goes back).
        ``async_commit`` turns the transaction's synchronous_commit off, ``generic`` makes
        its statements run their generic plans (_rows), in the same statement."""
        actor = current_actor()
        if actor is not None:
            conn.execute(
                "SELECT set_config('role', 'memd_app', true), "
                "set_config('memd.user_id', %s, true)"
                + (", set_config('synchronous_commit', 'off', true)" if async_commit else "")
                + (", set_config('plan_cache_mode', 'force_generic_plan', true)"
                   if generic else ""),
                (actor,),
            )
        elif async_commit:
            conn.execute("SET LOCAL synchronous_commit = off")

    def deep_scrub(self) -> list[str]:
        """Rewrite the tables and indexes a deleted row's bytes stay in (:mod:`.scrub`)."""
        with self._pool.connection() as conn:
            return deep_scrub(conn)

    def check_row_security(self) -> None:
        """Raise unless the role and policies that auth mode relies on are in place."""
        rows = self.rows(
            "SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles "
            "WHERE rolname = 'memd_app'"
        )
        if not rows or not rows[0][0]:
            raise StorageError(
                "auth mode needs the role memd_app, granted to memd's login role; a DBA "
                "can run: CREATE ROLE memd_app NOLOGIN; GRANT memd_app TO <login role>; "
                "then drop and re-create memd's database, or apply sql/postgres/"
                "003_auth.sql again"
            )
        policies = self.rows("SELECT count(*) FROM pg_policies WHERE policyname = 'memd_own_rows'")
        if int(policies[0][0]) < 8:
            raise StorageError("the Row-Level Security policies of 003_auth.sql are missing")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.txn():
            yield

    def in_transaction(self) -> bool:
        conn = self.current()
        if conn is None:
            return False
        # A read batch's connection is in no transaction until a transaction() opened
        # inside the batch begins one on it (_txn): its reads then see uncommitted writes.
        return (not getattr(self._local, "batch", False)
                or conn.info.transaction_status != _IDLE)

    @contextmanager
    def read_batch(self) -> Iterator[None]:
        if self.current() is not None:  # joins the transaction, keeps its durability
            yield
            return
        # One autocommit connection for the batch, no transaction: each read is one round
        # trip (as an acting user too, see _rows); a write opens a transaction of its own
        # (_txn), without the WAL-flush wait.
        try:
            with self._pool_of_thread().connection() as conn:
                self._local.conn = conn
                self._local.batch = True
                try:
                    yield
                finally:
                    self._local.conn = None
                    self._local.batch = False
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    def rows(self, query: Any, params: Params = (), *, generic: bool = False
              ) -> list[tuple[Any, ...]]:
        """One read's rows (binary: no text parsing of floats and vectors), in one round
        trip. As an acting user (row-level security) outside a transaction, _act_as_user's
        settings and the statement go in one pipeline: the statements before its Sync
        are one implicit transaction, which bounds the transaction-local settings, and
        a setting that fails skips the statement. ``generic``: a statement over a user's
        own partitions (_rows_in), prepared and run with its generic plan; the
        transaction's other statements keep custom plans."""
        with self._read() as conn:
            idle = conn.info.transaction_status == _IDLE
            if not generic and (current_actor() is None or not idle):
                return conn.execute(query, params, binary=True).fetchall()
            with conn.pipeline():
                if idle and current_actor() is not None:  # one statement for both
                    self._act_as_user(conn, generic=generic)
                elif generic:
                    conn.execute(_PLAN_MODE, ("force_generic_plan",))
                cur = conn.execute(query, params, binary=True, prepare=generic or None)
                if generic and not idle:  # an implicit transaction's ends at the Sync
                    conn.execute(_PLAN_MODE, ("force_custom_plan",))
            return cur.fetchall()

    def write(self, query: Any, params: Params = ()) -> int:
        """Execute one write; returns the number of rows changed."""
        with self.txn() as conn:
            return conn.execute(query, params).rowcount

    def write_many(self, query: Any, rows: Sequence[Params]) -> None:
        if not rows:
            return
        with self.txn() as conn, conn.cursor() as cur:
            cur.executemany(query, rows)

    def write_rows(self, query: Any, params: Params) -> list[tuple[Any, ...]]:
        """Rows of a writing statement (``RETURNING``), in a transaction."""
        with self.txn() as conn:
            return conn.execute(query, params).fetchall()

    def write_new(self, query: str, params: Sequence[Any]) -> int:
        """An insert of a fresh id: no Conflict to go on from, so no savepoint."""
        with self.txn(savepoint=False) as conn:
            return conn.execute(query, params).rowcount
