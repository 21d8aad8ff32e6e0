"""The team backend: PostgreSQL + pgvector + pg_trgm, every per-user table hash-partitioned
by user_id (seed 000 §2-4; the schema is sql/postgres/).

Same semantics and same dataclasses as :mod:`memd.backends.sqlite`, the reference
implementation. psycopg 3 (sync) over a small ``psycopg_pool`` pool; each pooled connection
has pgvector's types registered. A transaction belongs to one thread: the connection of the
current ``with store.transaction():`` is kept in a thread-local, and inner blocks (and every
writing method called inside one) run in a savepoint, so a failed write, e.g. a Conflict the
caller handles, undoes only itself and the outer transaction goes on, as on SQLite. The two
writes of every turn, ``append_messages`` and ``enqueue_job``, cannot raise a Conflict and
skip the savepoint (two round trips each); should one fail all the same, the transaction
raises when it ends rather than let psycopg's COMMIT silently roll it back.
Driver errors leave as memd errors: IntegrityError -> Conflict, DataError -> InvalidInput
(values PostgreSQL cannot store, such as NUL characters), anything else -> StorageError.

Schema: migrations (sql/postgres/NNN_*.sql) run in order, each in a transaction, under an
advisory lock; then the partitions of the recorded layout and the history's monthly
partitions are made a few per transaction (thousands of tables in one transaction would
exhaust the lock table). Every per-user query names user_id, so it is pruned to one hash
partition; working memory (tier 0) sits in UNLOGGED leaves. The session sweep
(:meth:`PostgresStore.expire_sessions`) keeps the next months' history partitions ready.

Vectors: KNN is ``ORDER BY embedding <=> q LIMIT k`` over HNSW indexes (cosine), with
pgvector's iterative index scan so that filters never starve the result. Keyword search is
``websearch_to_tsquery`` over a generated tsvector with ``ts_rank`` normalized by the best
hit, so relevance is in [0, 1] as on SQLite. Secure deletion is a VACUUM matter on
PostgreSQL and is not done here.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

try:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg.pq import TransactionStatus
    from psycopg.rows import TupleRow
    from psycopg.types.json import Jsonb, set_json_loads
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "memd's PostgreSQL backend needs the 'postgres' extra: pip install 'memd[postgres]'"
    ) from exc

from memd.auth import current_actor
from memd.backends.accounts import AccountsMixin
from memd.backends.base import (
    CALL_COLUMNS,
    PROVENANCES,
    SCOPES,
    TIERS,
    AccessHit,
    Vector,
    access_totals,
    call_record,
    calls_query,
    recent_query,
)
from memd.errors import Conflict, InvalidInput, MemdError, MigrationError, NotFound, StorageError
from memd.types import (
    Fact,
    Found,
    Job,
    Memory,
    MemoryFilter,
    Message,
    NewMessage,
    Scope,
    Session,
    SessionStatus,
    Usage,
)

log = logging.getLogger("memd.postgres")

Conn = psycopg.Connection[TupleRow]
Params = Sequence[Any] | Mapping[str, Any]
T = TypeVar("T")

# Memories are read from the view memory_rows (memories with their memory_stats row, see
# sql/postgres/004_memory_stats.sql) and written to the two tables.
_MEMORY_COLS = (
    "memory_id, user_id, workspace, session_id, memory_tier, memory_scope, content_text, "
    "content_hash, provenance_type, provenance_message_id, confidence, importance, "
    "relevance_accumulator, access_count, last_accessed_at, created_at, updated_at, "
    "expires_at, is_active, is_validated, token_count, superseded_by, tags, entities, metadata"
)
_INERROR = TransactionStatus.INERROR
_IDLE = TransactionStatus.IDLE
_PLAN_MODE = "SELECT set_config('plan_cache_mode', %s, true)"
_STATS_COLS = "user_id, memory_id, access_count, last_accessed_at, relevance_accumulator"
_STATS_DEFAULTS = {"relevance_accumulator": "0", "access_count": "0", "last_accessed_at": ""}
# The columns of the memories table itself: _MEMORY_COLS without the stats.
_MEMORY_TABLE_COLS = ", ".join(c for c in _MEMORY_COLS.split(", ") if c not in _STATS_DEFAULTS)
# _MEMORY_COLS over ``r`` (memories columns) left-joined to memory_stats ``s``.
_JOINED_COLS = ", ".join(
    (f"coalesce(s.{c}, {_STATS_DEFAULTS[c]})" if _STATS_DEFAULTS[c] else f"s.{c}")
    if c in _STATS_DEFAULTS else f"r.{c}"
    for c in _MEMORY_COLS.split(", ")
)
# The memories that have stats, by a join from memory_stats: ordering by its access_count
# reads the user's most accessed memories from idx_memory_stats_access in order, stopping
# at the LIMIT.
def _accessed(t: _Tables) -> str:
    return (f"(SELECT m.*, s.access_count AS hits FROM {t.memory_stats} s JOIN {t.memories} m "
            "ON m.user_id = s.user_id AND m.memory_id = s.memory_id) AS accessed")


def _with_stats(inner: str, tail: str = "", order: str = "", stats: str = "memory_stats"
                ) -> str:
    """``inner`` (a SELECT of _MEMORY_TABLE_COLS then ``tail`` columns, over one user's
    memories) with each row's stats: a primary-key probe per row ``inner`` kept
    (LATERAL with LIMIT 1, which keeps it from being flattened into a join that the
    planner would answer by hashing the user's whole stats). Its one parameter, the user
    id, follows ``inner``'s (it prunes memory_stats to that user's partition when the
    statement is planned). ``stats``: the table the stats are read from."""
    return (f"SELECT {_JOINED_COLS}{tail} FROM ({inner}) AS r LEFT JOIN LATERAL (SELECT "
            f"access_count, last_accessed_at, relevance_accumulator FROM {stats} "
            f"WHERE user_id = %s AND memory_id = r.memory_id LIMIT 1) AS s ON true {order}")


_ALONE_FOR = 60.0  # seconds PostgresStore._alone_in's answer is kept
# HNSW's candidate list (pgvector's default is 40): at least the memory candidates' KNN
# limit (50), since a scan whose list is shorter than its LIMIT goes on iteratively past
# the first pass. At the scale benchmark's target (10k memories, LIMIT 50, 40 queries x 5
# interleaved): 40 -> 2.99 ms p50, recall@50 0.872 against the exact KNN; 64 -> 2.19 ms,
# 0.910. At LIMIT 10 and 20 the time is the same as with 40 (1.38 / 1.73 ms), recall
# 0.922 -> 0.953 and 0.907 -> 0.936.
_EF_SEARCH = 64

# PostgreSQL's hash partitioning (partbounds.c, compute_partition_hash_value): a row goes
# to partition (hashtextextended(key, seed) + combine) mod 2^64 mod modulus.
_HASH_SEED = 0x7A5B22367996DCFD
_HASH_COMBINE = 0x49A0F4DD15E5A8E3


@dataclass(frozen=True, slots=True)
class _Tables:
    """What a statement over one user's rows reads: the partitioned parents (under
    row-level security, whose policies bind the parents, and inside a transaction), or
    that user's own partitions (``own``). A statement over parents is planned for every
    call (custom plans: a generic one would lock every partition of the layout); one over
    a user's own partitions names a few tables only, so it is prepared once per pooled
    connection and runs its generic plan without planning again (see _q_in)."""

    memories: str = "memories"
    memory_stats: str = "memory_stats"
    memory_entities: str = "memory_entities"
    messages: str = "messages"
    memory_leaves: tuple[str, ...] = ()  # the two partitions ``memories`` reads (own)

    @property
    def own(self) -> bool:
        return bool(self.memory_leaves)


_PARENTS = _Tables()


def _own_tables(key_hash: int, partitions: tuple[int, int, int]) -> _Tables:
    """The partitions holding the rows of the user whose partition key hashes (with
    hashtextextended and _HASH_SEED) to ``key_hash``, in sql/postgres/001_core.sql's
    layout (<parent>_pNNN; memories is split by tier first, then hashed)."""
    def leaf(parent: str, modulus: int) -> str:
        return f"{parent}_p{(key_hash + _HASH_COMBINE) % 2**64 % modulus:03d}"

    m, h = partitions[1], partitions[2]
    working, durable = leaf("memories_working", m), leaf("memories_durable", m)
    return _Tables(
        memories=f"(SELECT * FROM {working} UNION ALL SELECT * FROM {durable})",
        memory_stats=leaf("memory_stats", m), memory_entities=leaf("memory_entities", m),
        messages=leaf("messages", h), memory_leaves=(working, durable),
    )


_MESSAGE_COLS = (
    "message_id, session_id, user_id, turn_index, role, content, token_count, created_at, "
    "name, tool_calls, tool_call_id, content_hash, model_id, finish_reason, prompt_tokens, "
    "completion_tokens, latency_ms, is_compressed, compressed_summary_id, is_pruned, metadata, "
    "chain_hash"
)
_SESSION_COLS = (
    "session_id, user_id, workspace, created_at, updated_at, expires_at, status, model_id, "
    "context_window_size, system_prompt_hash, system_prompt_tokens, max_response_tokens, "
    "turn_count, total_prompt_tokens, total_completion_tokens, total_cost_microcents, "
    "summary_text, summary_token_count, parent_session_id, metadata, history_version"
)
_FACT_COLS = (
    "fact_id, user_id, category, key, value, confidence, importance, created_at, updated_at, "
    "workspace, is_active, superseded_by, source_message_id, metadata"
)
_JOB_COLS = "job_id, kind, payload, user_id, attempts, run_after, created_at, last_error"
_JOB_RETURNING = ", ".join("j." + c for c in _JOB_COLS.split(", "))
_MEMORY_UPDATABLE = {
    "text": "content_text", "content_hash": "content_hash", "token_count": "token_count",
    "tier": "memory_tier", "scope": "memory_scope", "confidence": "confidence",
    "importance": "importance", "is_active": "is_active", "is_validated": "is_validated",
    "superseded_by": "superseded_by", "expires_at": "expires_at", "tags": "tags",
    "metadata": "metadata", "updated_at": "updated_at", "entities": "entities",
    "provenance": "provenance_type",
}
_STATS_UPDATABLE = {"access_count": "access_count"}  # in memory_stats
_SESSION_UPDATABLE = {
    "status", "summary_text", "summary_token_count", "expires_at", "metadata", "updated_at",
    "model_id", "context_window_size", "max_response_tokens",
}
_MEMORY_ORDERS = ("created_at", "updated_at", "access_count", "importance")
_MIGRATION_LOCK = 0x6D656D64  # pg_advisory_xact_lock key ("memd") serializing migrations
_HISTORY_MONTHS = 3  # monthly history partitions kept ready: this month and the next two
_PARTITION_BATCH = 16  # partitions made per transaction (each locks its indexes till commit)
_WORD = re.compile(r"\w+", re.UNICODE)


def _ws(workspace: str | None) -> str:
    return workspace or ""


def _unws(value: str) -> str | None:
    return value or None


def _month(ts: float) -> tuple[int, int]:
    t = time.gmtime(ts)
    return t.tm_year, t.tm_mon


def _array(value: Any) -> NDArray[np.float32]:
    """A loaded vector as float32 numpy (pgvector >= 0.4 loads ``Vector`` objects)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


def search_text(text: str) -> str | None:
    """``websearch_to_tsquery`` input for free text: its words OR-ed (at most 32). Words are
    ``\\w+`` runs and the operator word "or" is dropped, so no search syntax survives:
    safe with any user text. PostgreSQL's english configuration drops stopwords."""
    words = [w for w in dict.fromkeys(_WORD.findall(text.lower())) if w != "or"][:32]
    return " or ".join(words) or None


def _json_loads(data: bytes | str) -> Any:
    """``json.loads``, with the most common value (metadata ``{}``) made without it."""
    return {} if data == b"{}" else json.loads(data)


def _ranked(rows: Sequence[Sequence[Any]], make: Callable[[Sequence[Any]], T]
            ) -> list[tuple[T, float]]:
    """Keyword rows, their rank last: each mapped by ``make``, with its rank relative to
    the best one (1.0 for the top row)."""
    top = max((float(r[-1]) for r in rows), default=0.0) or 1.0
    return [(make(r), float(r[-1]) / top) for r in rows]


# memd_keyword_own_memory_top's filter arguments (_probe_filter), typed: a NULL or a list
# of Python ints must name the function's argument types.
_PROBE_FILTER = ", %s::boolean, %s::float8, %s::smallint[], %s::smallint, %s::text, %s::text[]"


def _probe_filter(flt: MemoryFilter) -> list[Any]:
    """The filter arguments of memd_keyword_own_memory_top (011) after its workspaces,
    as PostgresStore._where applies them: with superseded rows, live at, tiers, scope,
    session, tags (None: no filter of that kind)."""
    return [
        flt.include_superseded,
        None if flt.include_expired else flt.now,
        None if flt.tiers is None else [int(t) for t in flt.tiers],
        None if flt.scope is None else int(flt.scope),
        flt.session_id,
        list(flt.tags) if flt.tags else None,
    ]


def _error(exc: psycopg.Error) -> MemdError:
    """The memd error for a driver error (the backend edge)."""
    if isinstance(exc, psycopg.IntegrityError):
        return Conflict(f"conflicting write: {exc}")
    if isinstance(exc, psycopg.DataError):
        return InvalidInput(f"PostgreSQL cannot store this value: {exc}")
    return StorageError(f"PostgreSQL: {exc}")


def _rolled_back() -> StorageError:
    """psycopg's COMMIT of a transaction an error aborted is a silent ROLLBACK: a caller
    that caught the error must not think its other writes were kept."""
    return StorageError("the transaction was rolled back: a statement in it failed and the "
                        "error was caught inside it")


class PostgresStore(AccountsMixin):
    """The Store protocol over one PostgreSQL database (pgvector and pg_trgm required).

    ``partitions`` are the hash partition counts of (sessions, memories, history) used when
    the schema is first created; an existing database keeps the counts it was made with.
    """

    _P = "%s"
    concurrent_reads = True  # a pooled connection per thread

    def __init__(
        self, dsn: str, dim: int = 384, partitions: tuple[int, int, int] = (256, 256, 512),
        *, pool_size: int = 8, side_pool_size: int = 4,
    ) -> None:
        self.dim = dim
        self.partitions = partitions
        self._local = threading.local()
        self._history_month = (0, 0)
        try:
            with psycopg.connect(dsn) as conn:
                self.database = str(conn.info.dbname)
                self._migrate(conn)
                self._add_history_months(conn, time.time(), _HISTORY_MONTHS)
        except psycopg.Error as exc:
            raise StorageError(f"cannot open the PostgreSQL store: {exc}") from exc
        # Autocommit connections: a read outside a transaction is its one statement, one
        # round trip (an implicit transaction would add a BEGIN and a COMMIT); every
        # write block opens its transaction explicitly (conn.transaction()).
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            dsn, min_size=1, max_size=pool_size, configure=self._configure, open=False,
            name="memd", kwargs={"autocommit": True},
        )
        # The engine's worker threads (side_reads) read from a pool of their own: a
        # request thread may hold a connection of the main pool (a read batch) while it
        # waits for its worker, so a worker waiting on the main pool could wait for ever
        # once every request thread holds one.
        self._side_pool: ConnectionPool[Conn] = ConnectionPool(
            dsn, min_size=1, max_size=side_pool_size, configure=self._configure,
            open=False, name="memd-side", kwargs={"autocommit": True},
        )
        # Statements over one user's own partitions (_Tables.own), prepared on first use
        # and run with their generic plan: no planning per call.
        self._own_pool: ConnectionPool[Conn] = ConnectionPool(
            dsn, min_size=min(2, side_pool_size), max_size=pool_size + side_pool_size,
            configure=self._configure_own,
            open=False, name="memd-own", kwargs={"autocommit": True},
        )
        # The memory candidates' keyword channel over a user's own partitions, outside
        # row-level security, runs here (_q_beside) while the request's thread runs the
        # other channels: the server ranks the keyword matches (up to ~2 ms for a query
        # whose words match several hundred memories) beside the KNN.
        self._beside = ThreadPoolExecutor(max_workers=max(2, pool_size),
                                          thread_name_prefix="memd-keyword")
        self._own: dict[str, _Tables] = {}  # user id -> its partitions
        self._alone: dict[str, tuple[bool, float]] = {}  # user id -> (alone, until when)
        try:
            self._pool.open(wait=True, timeout=30.0)
            self._side_pool.open()
            self._own_pool.open()
        except psycopg.Error as exc:
            self.close()
            raise StorageError(f"cannot open a PostgreSQL connection pool: {exc}") from exc

    # -- connection ------------------------------------------------------------------
    @staticmethod
    def _configure(conn: Conn) -> None:
        """Prepare a new pooled connection: pgvector types, strict iterative HNSW scans
        with a candidate list of _EF_SEARCH."""
        register_vector(conn)
        set_json_loads(_json_loads, conn)
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
        few tables, so the generic plan locks only them). Planning the memory candidates'
        statement took 2.7 ms over the parents, 1.3 ms over the partitions (the scale
        benchmark's target). Nothing else may run here: a generic plan of a statement
        over a parent, or of one inside a function that reads a parent, locks every
        partition of the layout."""
        cls._configure(conn)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.prepare_threshold = 0

    def _migrate(self, conn: Conn) -> None:
        """Apply sql/postgres/NNN_*.sql in order, each in its own transaction, under an
        advisory lock so that concurrent starts apply each file once; then make the
        layout's missing partitions (resumes where an interrupted start stopped)."""
        where = f"database {self.database!r}"
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                    "name text NOT NULL, applied_at double precision NOT NULL "
                    "DEFAULT extract(epoch FROM clock_timestamp()))"
                )
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_meta (key text PRIMARY KEY, value text)"
                )
                meta: dict[str, str] = dict(
                    conn.execute("SELECT key, value FROM schema_meta").fetchall()
                )
                done = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
        except psycopg.Error as exc:
            raise MigrationError(f"cannot read the schema version of {where}: {exc}") from exc
        if "dim" in meta and int(meta["dim"]) != self.dim:
            raise MigrationError(
                f"{where} holds {meta['dim']}-dim embeddings; this embedder makes "
                f"{self.dim}-dim ones (use a new database or the original embedder)"
            )
        if "partitions" in meta:  # fixed when the tables were made
            s, m, h = (int(p) for p in meta["partitions"].split(","))
            self.partitions = (s, m, h)
        files = sorted(
            (f for f in (resources.files("memd.sql") / "postgres").iterdir()
             if f.name.endswith(".sql")),
            key=lambda f: f.name,
        )
        known = {int(f.name.split("_", 1)[0]) for f in files}
        if done - known:
            raise MigrationError(
                f"{where} has schema versions {sorted(done - known)} unknown to this memd; "
                "upgrade memd"
            )
        fill = {
            "{dim}": str(self.dim), "{sessions_partitions}": str(self.partitions[0]),
            "{memory_partitions}": str(self.partitions[1]),
            "{history_partitions}": str(self.partitions[2]),
        }
        for f in files:
            version = int(f.name.split("_", 1)[0])
            if version in done:
                continue
            text = f.read_text("utf-8")
            for placeholder, value in fill.items():
                text = text.replace(placeholder, value)
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    if conn.execute(
                        "SELECT 1 FROM schema_migrations WHERE version = %s", (version,)
                    ).fetchone():
                        continue  # another process applied it meanwhile
                    conn.execute(text.encode("utf-8"))
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (version, f.name),
                    )
                    with conn.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO schema_meta (key, value) VALUES (%s, %s) "
                            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                            [("dim", str(self.dim)),
                             ("partitions", ",".join(str(p) for p in self.partitions))],
                        )
            except psycopg.Error as exc:
                raise MigrationError(f"migration {f.name} failed on {where}: {exc}") from exc
        try:
            while self._locked_batch(conn, "SELECT memd_add_partitions(%s)", (_PARTITION_BATCH,)):
                pass
        except psycopg.Error as exc:
            raise MigrationError(f"cannot create the partitions of {where}: {exc}") from exc

    @staticmethod
    def _locked_batch(conn: Conn, query: str, params: Params) -> int:
        """Run one batch of partition DDL (a function returning how many partitions it
        made) in its own transaction, under the migration lock; returns the count."""
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '10s'")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            row = conn.execute(query, params).fetchone()
        return int(row[0]) if row else 0

    def _add_history_months(self, conn: Conn, now: float, months: int) -> int:
        """Make the monthly history partitions from ``now``'s month on; returns how many."""
        made = 0
        while n := self._locked_batch(
            conn, "SELECT memd_ensure_history_months(%s, %s, %s)",
            (now, months, _PARTITION_BATCH),
        ):
            made += n
        self._history_month = _month(now)
        return made

    def close(self) -> None:
        self._beside.shutdown(wait=True)
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

    def _current(self) -> Conn | None:
        conn: Conn | None = getattr(self._local, "conn", None)
        return conn

    @contextmanager
    def _txn(self, savepoint: bool = True, *, async_commit: bool = False) -> Iterator[Conn]:
        """A connection in a transaction: a savepoint in the thread's current transaction,
        or a pooled connection in a new one that commits at the end of the block.

        ``savepoint=False`` is for writes no caller handles a failure of (no Conflict can
        come out of them): they join the current transaction as they are and save the
        SAVEPOINT and RELEASE round trips. If one fails, the transaction is aborted,
        and leaving it then raises (below) rather than commit what came before.
        ``async_commit``: a new transaction commits without waiting for the WAL flush."""
        conn = self._current()
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
            raise _error(exc) from exc

    @contextmanager
    def _own_txn(self, conn: Conn, async_commit: bool) -> Iterator[None]:
        """A transaction of ``conn``'s own, as the acting user (_act); leaving it after a
        statement in it failed raises instead of committing what came before."""
        with conn.transaction():
            self._act(conn, async_commit)
            yield
            if conn.info.transaction_status == _INERROR:
                raise _rolled_back()

    @contextmanager
    def _read(self) -> Iterator[Conn]:
        """A connection for reading: the thread's (a transaction's or a read batch's),
        else a pooled one."""
        conn = self._current()
        try:
            if conn is not None:
                yield conn
                return
            with self._pool_of_thread().connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise _error(exc) from exc

    @staticmethod
    def _act(conn: Conn, async_commit: bool = False, generic: bool = False) -> None:
        """Row-Level Security: in a request authenticated as a user, the transaction runs
        as the unprivileged ``memd_app`` role with ``memd.user_id`` set to that user, so
        the policies of sql/postgres/003_auth.sql bind every query in it (both settings
        are transaction-local and vanish when the pooled connection goes back).
        ``async_commit`` turns the transaction's synchronous_commit off, ``generic`` makes
        its statements run their generic plans (_q), in the same statement."""
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

    def check_row_security(self) -> None:
        """Raise unless the role and policies that auth mode relies on are in place."""
        rows = self._q(
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
        policies = self._q("SELECT count(*) FROM pg_policies WHERE policyname = 'memd_own_rows'")
        if int(policies[0][0]) < 8:
            raise StorageError("the Row-Level Security policies of 003_auth.sql are missing")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._txn():
            yield

    def in_transaction(self) -> bool:
        conn = self._current()
        if conn is None:
            return False
        # A read batch's connection is in no transaction until a transaction() opened
        # inside the batch begins one on it (_txn): its reads then see uncommitted writes.
        return (not getattr(self._local, "batch", False)
                or conn.info.transaction_status != _IDLE)

    @contextmanager
    def read_batch(self) -> Iterator[None]:
        if self._current() is not None:  # joins the transaction, keeps its durability
            yield
            return
        # One autocommit connection for the batch, no transaction: each read is one round
        # trip (as an acting user too, see _q); a write opens a transaction of its own
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
            raise _error(exc) from exc

    def _q(self, query: Any, params: Params = (), *, generic: bool = False
           ) -> list[tuple[Any, ...]]:
        """One read's rows (binary: no text parsing of floats and vectors), in one round
        trip. As an acting user (row-level security) outside a transaction, _act's
        settings and the statement go in one pipeline: the statements before its Sync
        are one implicit transaction, which bounds the transaction-local settings, and
        a setting that fails skips the statement. ``generic``: a statement over a user's
        own partitions (_q_in), prepared and run with its generic plan; the
        transaction's other statements keep custom plans."""
        with self._read() as conn:
            idle = conn.info.transaction_status == _IDLE
            if not generic and (current_actor() is None or not idle):
                return conn.execute(query, params, binary=True).fetchall()
            with conn.pipeline():
                if idle and current_actor() is not None:  # one statement for both
                    self._act(conn, generic=generic)
                elif generic:
                    conn.execute(_PLAN_MODE, ("force_generic_plan",))
                cur = conn.execute(query, params, binary=True, prepare=generic or None)
                if generic and not idle:  # an implicit transaction's ends at the Sync
                    conn.execute(_PLAN_MODE, ("force_custom_plan",))
            return cur.fetchall()

    def _tables(self, user_id: str, *, under_rls: bool = False) -> _Tables:
        """Where to read ``user_id``'s rows: their own partitions when no row-level
        security applies and the thread's connection is in no transaction (its writes
        would not be seen from another connection; a read batch's is not in one); the
        parents otherwise. ``under_rls``: the caller reads only tables whose leaves
        carry row-level security of their own (sql/postgres/009), so a request acting as
        ``user_id`` itself reads that user's partitions too, in its transaction. Which
        partitions is asked of the server once per user (its hash function), then
        kept."""
        conn = self._current()
        actor = current_actor()
        if actor is not None:
            if not (under_rls and actor == user_id):
                return _PARENTS
        elif conn is not None and conn.info.transaction_status != _IDLE:
            return _PARENTS
        tables = self._own.get(user_id)
        if tables is None:
            (key_hash,), = self._q("SELECT hashtextextended(%s, %s)", (user_id, _HASH_SEED))
            tables = _own_tables(int(key_hash), self.partitions)
            if len(self._own) >= 10_000:
                self._own.clear()
                self._alone.clear()
            self._own[user_id] = tables
        return tables

    def _alone_in(self, user_id: str, tables: _Tables) -> bool:
        """Whether ``user_id`` is the only user with rows in their memory partitions
        (asked again after _ALONE_FOR seconds). Only then does a generic plan serve the
        memory statements: it cannot see what share of a partition's rows a user holds.
        A custom plan reads a small share through the user_id index and sorts it; the
        generic plan walks the HNSW graph past the other users' rows (the scale
        benchmark's 1,000-memory user, beside two users of 10,000: compile p50 12.7 ms
        with custom plans, 29.6 ms with the generic plan)."""
        now = time.monotonic()
        known = self._alone.get(user_id)
        if known is None or now >= known[1]:
            only = " AND ".join(
                f"(SELECT coalesce(min(user_id) = %(u)s AND max(user_id) = %(u)s, true) "
                f"FROM {leaf})" for leaf in tables.memory_leaves)
            try:  # as the owner, outside any request's row-level security (which
                # would show only the user's own rows, so always "alone")
                with self._own_pool.connection() as conn:
                    (alone,), = conn.execute(f"SELECT {only}", {"u": user_id}).fetchall()
            except psycopg.Error as exc:
                raise _error(exc) from exc
            known = self._alone[user_id] = (bool(alone), now + _ALONE_FOR)
        return known[0]

    def _q_in(self, tables: _Tables, query: str, params: Params, generic: bool = True
              ) -> list[tuple[Any, ...]]:
        """_q for a statement over ``tables``: one over a user's own partitions runs on
        the pool whose connections prepare statements and keep their generic plans,
        unless ``generic`` is false (then it is planned for each call, as over parents)."""
        if not (tables.own and generic):
            return self._q(query, params)
        if current_actor() is not None:
            return self._q(query, params, generic=True)
        try:
            with self._own_pool.connection() as conn:
                return conn.execute(query, params, binary=True).fetchall()
        except psycopg.Error as exc:
            raise _error(exc) from exc

    def _q_beside(self, tables: _Tables, query: str, params: Params, generic: bool
                  ) -> list[tuple[Any, ...]]:
        """_q_in on a worker thread of self._beside: on a connection of the own pool or
        the side pool, never of the main pool, which the request thread waiting for it
        may hold (a read batch)."""
        with self.side_reads():
            return self._q_in(tables, query, params, generic)

    def _x(self, query: Any, params: Params = ()) -> int:
        """Execute one write; returns the number of rows changed."""
        with self._txn() as conn:
            return conn.execute(query, params).rowcount

    def _many(self, query: Any, rows: Sequence[Params]) -> None:
        if not rows:
            return
        with self._txn() as conn, conn.cursor() as cur:
            cur.executemany(query, rows)

    def _vector(self, vector: Vector) -> NDArray[np.float32]:
        arr = np.asarray(vector, dtype=np.float32)
        if arr.shape != (self.dim,):
            raise StorageError(f"vector has {arr.size} dims, store expects {self.dim}")
        return arr

    def schema_version(self) -> int:
        return int(self._q("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0])

    def ensure_history_partitions(self, now: float, months: int = _HISTORY_MONTHS) -> int:
        """Create the monthly history partitions for the ``months`` months from ``now``'s
        (every hash partition), in short transactions of their own; returns how many were
        made. Runs at start and from the session sweep when the month changes. Not inside a
        transaction: the DDL would wait for that transaction's own locks."""
        if self._current() is not None:
            raise StorageError("ensure_history_partitions() runs outside a transaction")
        try:
            with self._pool.connection() as conn:
                return self._add_history_months(conn, now, months)
        except psycopg.Error as exc:
            raise _error(exc) from exc

    # -- row mapping -----------------------------------------------------------------
    @staticmethod
    def _session(r: Sequence[Any]) -> Session:
        return Session(
            id=r[0], user_id=r[1], workspace=_unws(r[2]), created_at=r[3], updated_at=r[4],
            expires_at=r[5], status=SessionStatus(r[6]), model=r[7], context_window=r[8],
            system_prompt_hash=r[9], system_prompt_tokens=r[10], max_response_tokens=r[11],
            turn_count=r[12], total_prompt_tokens=r[13], total_completion_tokens=r[14],
            total_cost_microcents=r[15], summary_text=r[16], summary_token_count=r[17],
            parent_session_id=r[18], metadata=r[19], history_version=r[20],
        )

    @staticmethod
    def _message(r: Sequence[Any]) -> Message:
        return Message(
            id=r[0], session_id=r[1], user_id=r[2], turn_index=r[3], role=r[4], content=r[5],
            token_count=r[6], created_at=r[7], name=r[8], tool_calls=r[9], tool_call_id=r[10],
            content_hash=r[11], model=r[12], finish_reason=r[13], prompt_tokens=r[14],
            completion_tokens=r[15], latency_ms=r[16], is_compressed=r[17],
            compressed_summary_id=r[18], is_pruned=r[19], metadata=r[20], chain_hash=r[21],
        )

    @staticmethod
    def _memory(r: Sequence[Any]) -> Memory:
        return Memory(
            id=r[0], user_id=r[1], workspace=_unws(r[2]), session_id=r[3], tier=TIERS[r[4]],
            scope=SCOPES[r[5]], text=r[6], content_hash=r[7], provenance=PROVENANCES[r[8]],
            provenance_message_id=r[9], confidence=r[10], importance=r[11],
            relevance_accumulator=r[12], access_count=r[13], last_accessed_at=r[14],
            created_at=r[15], updated_at=r[16], expires_at=r[17], is_active=r[18],
            is_validated=r[19], token_count=r[20], superseded_by=r[21], tags=tuple(r[22]),
            entities=tuple(r[23]), metadata=r[24],
        )

    @staticmethod
    def _fact(r: Sequence[Any]) -> Fact:
        return Fact(
            id=r[0], user_id=r[1], category=r[2], key=r[3], value=r[4], confidence=r[5],
            importance=r[6], created_at=r[7], updated_at=r[8], workspace=_unws(r[9]),
            is_active=r[10], superseded_by=r[11], source_message_id=r[12], metadata=r[13],
        )

    @staticmethod
    def _job(r: Sequence[Any]) -> Job:
        return Job(id=r[0], kind=r[1], payload=r[2], user_id=r[3], attempts=r[4],
                   run_after=r[5], created_at=r[6], last_error=r[7])

    # -- sessions --------------------------------------------------------------------
    def create_session(self, session: Session) -> Session:
        s = session
        self._x(
            f"INSERT INTO sessions ({_SESSION_COLS}) VALUES ({', '.join(['%s'] * 21)})",
            (s.id, s.user_id, _ws(s.workspace), s.created_at, s.updated_at, s.expires_at,
             int(s.status), s.model, s.context_window, s.system_prompt_hash,
             s.system_prompt_tokens, s.max_response_tokens, s.turn_count,
             s.total_prompt_tokens, s.total_completion_tokens, s.total_cost_microcents,
             s.summary_text, s.summary_token_count, s.parent_session_id, Jsonb(s.metadata),
             s.history_version),
        )
        return session

    def get_session(self, user_id: str, session_id: str) -> Session | None:
        rows = self._q(
            f"SELECT {_SESSION_COLS} FROM sessions WHERE user_id = %s AND session_id = %s",
            (user_id, session_id),
        )
        return self._session(rows[0]) if rows else None

    def list_sessions(self, user_id: str, limit: int = 50) -> list[Session]:
        rows = self._q(
            f"SELECT {_SESSION_COLS} FROM sessions WHERE user_id = %s "
            "ORDER BY created_at DESC, session_id LIMIT %s",
            (user_id, limit),
        )
        return [self._session(r) for r in rows]

    def update_session(self, user_id: str, session_id: str, **changes: Any) -> None:
        bad = set(changes) - _SESSION_UPDATABLE
        if bad:
            raise ValueError(f"not updatable on a session: {sorted(bad)}")
        if not changes:
            return
        values = [
            Jsonb(v) if k == "metadata" else int(v) if k == "status" else v
            for k, v in changes.items()
        ]
        sets = sql.SQL(", ").join(
            sql.SQL("{} = %s").format(sql.Identifier(k)) for k in changes
        )
        query = sql.SQL("UPDATE sessions SET {} WHERE user_id = %s AND session_id = %s")
        if not self._x(query.format(sets), (*values, user_id, session_id)):
            raise NotFound(f"no session {session_id!r} for user {user_id!r}")

    def add_session_usage(
        self, user_id: str, session_id: str, prompt_tokens: int, completion_tokens: int,
        cost_microcents: int, now: float,
    ) -> None:
        self._x(
            "UPDATE sessions SET total_prompt_tokens = total_prompt_tokens + %s, "
            "total_completion_tokens = total_completion_tokens + %s, "
            "total_cost_microcents = total_cost_microcents + %s, updated_at = %s "
            "WHERE user_id = %s AND session_id = %s",
            (prompt_tokens, completion_tokens, cost_microcents, now, user_id, session_id),
        )

    def register_system_prompt(self, prompt_hash: str, text: str, token_count: int) -> None:
        self._x(
            "INSERT INTO system_prompts (prompt_hash, text, token_count) VALUES (%s, %s, %s) "
            "ON CONFLICT (prompt_hash) DO NOTHING",
            (prompt_hash, text, token_count),
        )

    def get_system_prompt(self, prompt_hash: str) -> str | None:
        rows = self._q("SELECT text FROM system_prompts WHERE prompt_hash = %s", (prompt_hash,))
        return rows[0][0] if rows else None

    # -- messages --------------------------------------------------------------------
    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None,
    ) -> list[Message]:
        chains = list(chain_hashes) if chain_hashes is not None else [None] * len(messages)
        # No savepoint: nothing here raises an error a caller goes on from (the row lock
        # keeps the turns unique; NotFound comes before any write).
        with self._txn(savepoint=False) as conn:
            # The session's row lock: concurrent appends to one session take turns, so
            # turns stay unique. Taken by the update itself, which returns the new count.
            row = conn.execute(
                "UPDATE sessions SET turn_count = turn_count + %s, updated_at = %s "
                "WHERE user_id = %s AND session_id = %s RETURNING turn_count",
                (len(messages), now, user_id, session_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"no session {session_id!r} for user {user_id!r}")
            turn = int(row[0]) - len(messages)
            out: list[Message] = []
            for msg, tokens, chash, chain in zip(
                messages, token_counts, content_hashes, chains, strict=True
            ):
                turn += 1
                out.append(Message(
                    id=uuid.uuid4().hex, session_id=session_id, user_id=user_id,
                    turn_index=turn, role=msg.role, content=msg.content, token_count=tokens,
                    created_at=now, name=msg.name, tool_calls=msg.tool_calls,
                    tool_call_id=msg.tool_call_id, content_hash=chash, model=msg.model,
                    finish_reason=msg.finish_reason, prompt_tokens=msg.prompt_tokens,
                    completion_tokens=msg.completion_tokens, latency_ms=msg.latency_ms,
                    metadata=dict(msg.metadata), chain_hash=chain,
                ))
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO messages ({_MESSAGE_COLS}) VALUES ({', '.join(['%s'] * 22)})",
                    [(m.id, m.session_id, m.user_id, m.turn_index, m.role, m.content,
                      m.token_count, m.created_at, m.name,
                      Jsonb(m.tool_calls) if m.tool_calls is not None else None,
                      m.tool_call_id, m.content_hash, m.model, m.finish_reason,
                      m.prompt_tokens, m.completion_tokens, m.latency_ms, False, None, False,
                      Jsonb(m.metadata), m.chain_hash) for m in out],
                )
        return out

    def get_messages(
        self, user_id: str, session_id: str, *, active_only: bool = False,
        after_turn: int | None = None, before_turn: int | None = None,
        limit: int | None = None, newest_first: bool = False,
    ) -> list[Message]:
        where = "user_id = %s AND session_id = %s"
        params: list[Any] = [user_id, session_id]
        if active_only:
            where += " AND NOT is_compressed AND NOT is_pruned"
        if after_turn is not None:
            where += " AND turn_index > %s"
            params.append(after_turn)
        if before_turn is not None:
            where += " AND turn_index < %s"
            params.append(before_turn)
        order = "DESC" if newest_first else "ASC"
        query = f"SELECT {_MESSAGE_COLS} FROM messages WHERE {where} ORDER BY turn_index {order}"
        if limit is not None:
            query += " LIMIT %s"
            params.append(limit)
        return [self._message(r) for r in self._q(query, params)]

    def recent_messages(
        self, user_id: str, session_id: str, token_budget: int, *,
        before_turn: int | None = None, limit: int = 512,
    ) -> list[Message]:
        tables = self._tables(user_id)
        query, params = recent_query(
            _MESSAGE_COLS, user_id, session_id, before_turn, mark="%s",
            active="NOT is_compressed AND NOT is_pruned", nonneg="greatest",
            table=tables.messages,
        )
        rows = self._q_in(tables, query, (*params, limit, token_budget))
        return [self._message(r) for r in rows]

    def find_chain(self, user_id: str, chain_hashes: Sequence[str]) -> list[Message]:
        if not chain_hashes:
            return []
        rows = self._q(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = %s "
            "AND chain_hash = ANY(%s) ORDER BY session_id, turn_index",
            (user_id, list(dict.fromkeys(chain_hashes))),
        )
        return [self._message(r) for r in rows]

    def get_message(self, user_id: str, message_id: str) -> Message | None:
        rows = self._q(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = %s AND message_id = %s",
            (user_id, message_id),
        )
        return self._message(rows[0]) if rows else None

    def mark_compressed(
        self, user_id: str, session_id: str, message_ids: Sequence[str], summary_id: str
    ) -> None:
        with self._txn() as conn:
            conn.execute(
                "UPDATE messages SET is_compressed = true, compressed_summary_id = %s "
                "WHERE user_id = %s AND session_id = %s AND message_id = ANY(%s)",
                (summary_id, user_id, session_id, list(message_ids)),
            )
            conn.execute(
                "UPDATE sessions SET history_version = history_version + 1 "
                "WHERE user_id = %s AND session_id = %s", (user_id, session_id),
            )

    def set_message_embeddings(self, user_id: str, items: Sequence[tuple[str, Vector]]) -> None:
        self._many(
            "UPDATE messages SET embedding = %s WHERE user_id = %s AND message_id = %s",
            [(self._vector(v), user_id, mid) for mid, v in items],
        )

    def messages_missing_embedding(self, user_id: str, limit: int) -> list[Message]:
        rows = self._q(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = %s AND embedding IS NULL "
            "AND content IS NOT NULL ORDER BY created_at, session_id, turn_index LIMIT %s",
            (user_id, limit),
        )
        return [self._message(r) for r in rows]

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        q = self._vector(vector)
        where = "user_id = %s AND embedding IS NOT NULL"
        params: list[Any] = [q, user_id]
        if session_id is not None:
            where += " AND session_id = %s"
            params.append(session_id)
        rows = self._q(
            f"SELECT {_MESSAGE_COLS}, 1 - (embedding <=> %s) FROM messages WHERE {where} "
            "ORDER BY embedding <=> %s LIMIT %s",
            (*params, q, k),
        )
        return [(self._message(r), float(r[-1])) for r in rows]

    def keyword_messages(
        self, user_id: str, query: str, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        text = search_text(query)
        if text is None:
            return []
        if current_actor() is not None:
            return self._keyword_messages_rls(user_id, text, k, session_id)
        where = "user_id = %s AND content_tsv @@ websearch_to_tsquery('english', %s)"
        params: list[Any] = [text, user_id, text]
        if session_id is not None:
            where += " AND session_id = %s"
            params.append(session_id)
        rows = self._q(
            f"SELECT {_MESSAGE_COLS}, "
            "ts_rank(content_tsv, websearch_to_tsquery('english', %s)) AS r "
            f"FROM messages WHERE {where} ORDER BY r DESC, message_id LIMIT %s",
            (*params, k),
        )
        return _ranked(rows, self._message)

    def _keyword_messages_rls(
        self, user_id: str, text: str, k: int, session_id: str | None
    ) -> list[tuple[Message, float]]:
        """keyword_messages under RLS: the GIN probe runs in memd_keyword_message_ids
        (see sql/postgres/003_auth.sql), the rows are read through the policies."""
        rows = self._q(
            f"SELECT {_MESSAGE_COLS}, k.rank FROM memd_keyword_message_ids("
            "%s, websearch_to_tsquery('english', %s), %s, %s) AS k (kid, kat, rank) "
            "JOIN messages ON user_id = %s AND message_id = k.kid AND created_at = k.kat "
            "ORDER BY k.rank DESC, message_id",
            (user_id, text, k, session_id, user_id),
        )
        return _ranked(rows, self._message)

    # -- memories --------------------------------------------------------------------
    def insert_memory(self, memory: Memory, vector: Vector | None) -> Memory:
        m = memory
        emb = self._vector(vector) if vector is not None else None
        with self._txn() as conn:
            conn.execute(
                f"INSERT INTO memories ({_MEMORY_TABLE_COLS}, embedding) "
                f"VALUES ({', '.join(['%s'] * 23)})",
                (m.id, m.user_id, _ws(m.workspace), m.session_id, int(m.tier), int(m.scope),
                 m.text, m.content_hash, int(m.provenance), m.provenance_message_id,
                 m.confidence, m.importance, m.created_at, m.updated_at, m.expires_at,
                 m.is_active, m.is_validated, m.token_count, m.superseded_by,
                 list(m.tags), list(m.entities), Jsonb(m.metadata), emb),
            )
            conn.execute(
                f"INSERT INTO memory_stats ({_STATS_COLS}) VALUES (%s, %s, %s, %s, %s)",
                (m.user_id, m.id, m.access_count, m.last_accessed_at,
                 m.relevance_accumulator),
            )
            if m.entities:
                self.link_entities(m.user_id, m.id, m.entities)
        return memory

    def get_memory(self, user_id: str, memory_id: str) -> Memory | None:
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE user_id = %s AND memory_id = %s",
            (user_id, memory_id),
        )
        return self._memory(rows[0]) if rows else None

    def find_memory_id(self, memory_id: str) -> tuple[str, Memory] | None:
        rows = self._q(f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE memory_id = %s", (memory_id,))
        if not rows:
            return None
        mem = self._memory(rows[0])
        return mem.user_id, mem

    def find_by_hash(
        self, user_id: str, workspace: str | None, content_hash: str
    ) -> Memory | None:
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE user_id = %s AND content_hash = %s "
            "AND workspace = %s AND is_active ORDER BY created_at, memory_id LIMIT 1",
            (user_id, content_hash, _ws(workspace)),
        )
        return self._memory(rows[0]) if rows else None

    def update_memory(
        self, user_id: str, memory_id: str, vector: Vector | None = None, **changes: Any
    ) -> Memory:
        bad = set(changes) - set(_MEMORY_UPDATABLE) - set(_STATS_UPDATABLE)
        if bad:
            raise ValueError(f"not updatable on a memory: {sorted(bad)}")
        sets: list[sql.Composable] = []
        values: list[Any] = []
        stats = {k: v for k, v in changes.items() if k in _STATS_UPDATABLE}
        for k, v in changes.items():
            if k in stats:
                continue
            sets.append(sql.SQL("{} = %s").format(sql.Identifier(_MEMORY_UPDATABLE[k])))
            if k in ("tags", "entities"):
                v = list(v)
            elif k == "metadata":
                v = Jsonb(v)
            elif k in ("is_active", "is_validated"):
                v = bool(v)
            elif k in ("tier", "scope", "provenance"):
                v = int(v)
            values.append(v)
        if vector is not None:
            sets.append(sql.SQL("embedding = %s"))
            values.append(self._vector(vector))
        with self._txn() as conn:
            # A tier change to or from 0 moves the row between memories_working and
            # memories_durable; the read after the updates finds it where it landed.
            if sets:
                conn.execute(sql.SQL(
                    "UPDATE memories SET {} WHERE user_id = %s AND memory_id = %s"
                ).format(sql.SQL(", ").join(sets)), (*values, user_id, memory_id))
            if stats:
                conn.execute(sql.SQL(
                    "UPDATE memory_stats SET {} WHERE user_id = %s AND memory_id = %s"
                ).format(sql.SQL(", ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(_STATS_UPDATABLE[k]))
                    for k in stats
                )), (*(int(v) for v in stats.values()), user_id, memory_id))
            row = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE user_id = %s AND memory_id = %s",
                (user_id, memory_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"no memory {memory_id!r} for user {user_id!r}")
            if "entities" in changes:
                conn.execute(
                    "DELETE FROM memory_entities WHERE user_id = %s AND memory_id = %s",
                    (user_id, memory_id),
                )
                self.link_entities(user_id, memory_id, changes["entities"])
        return self._memory(row)

    def _forget(self, conn: Conn, user_id: str, removed: Sequence[tuple[str, str]]) -> None:
        """Remove what was derived from deleted memories, given (memory_id, content_hash)."""
        if not removed:
            return
        ids = [r[0] for r in removed]
        for table in ("memory_entities", "memory_stats"):
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE user_id = %s AND memory_id = ANY(%s)").format(
                    sql.Identifier(table)),
                (user_id, ids),
            )
        conn.execute(
            "DELETE FROM embedding_cache WHERE content_hash = ANY(%s)", ([r[1] for r in removed],)
        )
        conn.execute(
            "UPDATE memories SET superseded_by = NULL WHERE user_id = %s "
            "AND superseded_by = ANY(%s)",
            (user_id, ids),
        )

    def _delete_memories(self, user_id: str, where: str, params: Sequence[Any]) -> int:
        """Delete the user's memories matching ``where`` and everything derived from
        them (see :meth:`_forget`); returns how many."""
        with self._txn() as conn:
            removed = conn.execute(
                f"DELETE FROM memories WHERE user_id = %s AND {where} "
                "RETURNING memory_id, content_hash",
                (user_id, *params),
            ).fetchall()
            self._forget(conn, user_id, removed)
        return len(removed)

    def delete_memory(self, user_id: str, memory_id: str) -> bool:
        return self._delete_memories(user_id, "memory_id = %s", (memory_id,)) > 0

    @staticmethod
    def _where(user_id: str, flt: MemoryFilter) -> tuple[str, list[Any]]:
        """SQL for ``flt`` over memories (bare column names) and its parameters."""
        clauses = ["user_id = %s"]
        params: list[Any] = [user_id]
        if not flt.include_inactive:
            clauses.append("is_active")
        if not flt.include_superseded:
            clauses.append("superseded_by IS NULL")
        if not flt.include_expired and flt.now is not None:
            clauses.append("(expires_at IS NULL OR expires_at > %s)")
            params.append(flt.now)
        if flt.workspaces is not None:
            clauses.append("workspace = ANY(%s)")
            params.append(list(flt.workspaces))
        if flt.tiers is not None:
            clauses.append("memory_tier = ANY(%s)")
            params.append([int(t) for t in flt.tiers])
        if flt.scope is not None:
            clauses.append("memory_scope = %s")
            params.append(int(flt.scope))
        if flt.session_id is not None:
            clauses.append("(memory_scope = 1 OR session_id = %s)")
            params.append(flt.session_id)
        if flt.tags:
            clauses.append("tags @> %s")
            params.append(list(flt.tags))
        return " AND ".join(clauses), params

    def list_memories(
        self, user_id: str, flt: MemoryFilter, limit: int = 100, offset: int = 0,
        order: str = "created_at",
    ) -> list[Memory]:
        if order not in _MEMORY_ORDERS:
            raise ValueError(f"cannot order memories by {order!r}")
        where, params = self._where(user_id, flt)
        query = sql.SQL(
            f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE {where} "
            "ORDER BY {} DESC, memory_id LIMIT %s OFFSET %s"
        ).format(sql.Identifier(order))
        return [self._memory(r) for r in self._q(query, (*params, limit, offset))]

    def count_memories(self, user_id: str, flt: MemoryFilter) -> int:
        where, params = self._where(user_id, flt)
        return int(self._q(f"SELECT count(*) FROM memories WHERE {where}", params)[0][0])

    def nearest_memories(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        q = self._vector(vector)
        where, params = self._where(user_id, flt)
        rows = self._q(_with_stats(
            f"SELECT {_MEMORY_TABLE_COLS}, 1 - (embedding <=> %s) AS sim FROM memories "
            f"WHERE {where} AND embedding IS NOT NULL ORDER BY embedding <=> %s LIMIT %s",
            ", r.sim"), (q, *params, q, k, user_id),
        )
        pairs = [(self._memory(r), float(r[-1])) for r in rows]
        return sorted(pairs, key=lambda p: (-p[1], p[0].id))

    def keyword_memories(
        self, user_id: str, query: str, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        text = search_text(query)
        if text is None:
            return []
        query_sql, params = self._keyword_select(user_id, text, k, flt)
        rows = self._q(_with_stats(query_sql, ", r.rank_", "ORDER BY r.rank_ DESC, r.memory_id"),
                       (*params, user_id))
        return _ranked(rows, self._memory)

    def _keyword_select(
        self, user_id: str, text: str, k: int, flt: MemoryFilter, extra: str = "",
        extra_params: Sequence[Any] = (), tables: _Tables = _PARENTS,
    ) -> tuple[str, list[Any]]:
        """The keyword channel's SELECT over memories (``tables``' memories):
        _MEMORY_TABLE_COLS, ``extra`` columns, the rank (``rank_``); best first."""
        where, params = self._where(user_id, flt)
        if current_actor() is not None:
            # Under RLS: ids from a GIN probe run as the owner, rows through the policies.
            # Over the user's own leaves the probe names them and applies the whole
            # filter (011): its top k are the answer. Over the parents it plans its query
            # across every partition at each call and applies only part of the filter
            # (005), so its ids are over-fetched and the rest applies after it.
            if tables.own:
                probe, filter_args = "memd_keyword_own_memory_top(%s, %s, %s, ", _PROBE_FILTER
                probe_params = [user_id, *tables.memory_leaves]
                lim, tail = k, _probe_filter(flt)
            else:
                probe, filter_args = "memd_keyword_memory_ids(%s, ", ""
                probe_params = [user_id]
                lim, tail = 4 * k + 20, []
            return (
                f"SELECT {_MEMORY_TABLE_COLS}{extra}, k.rank::float8 AS rank_ FROM {probe}"
                f"websearch_to_tsquery('english', %s), %s, %s, %s::text[]{filter_args}) "
                f"AS k (kid, ktier, rank) JOIN {tables.memories} AS memories "
                "ON memory_id = k.kid AND memory_tier = k.ktier "
                f"WHERE {where} ORDER BY k.rank DESC, memory_id LIMIT %s",
                [*extra_params, *probe_params, text, lim, not flt.include_inactive,
                 None if flt.workspaces is None else list(flt.workspaces), *tail,
                 *params, k],
            )
        # A generic plan (own partitions) would parse the query again for every row it
        # ranks or rechecks; a sub-select is computed once. A custom plan folds the call.
        tsq = "websearch_to_tsquery('english', %s)"
        if tables.own:
            tsq = f"(SELECT {tsq})"
        return (
            f"SELECT {_MEMORY_TABLE_COLS}{extra}, ts_rank(content_tsv, {tsq})::float8 AS rank_ "
            f"FROM {tables.memories} AS memories WHERE {where} AND content_tsv @@ {tsq} "
            f"ORDER BY rank_ DESC, memory_id LIMIT {int(k)}",
            [*extra_params, text, *params, text],
        )

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        """All channels in one statement (a UNION ALL of one branch per channel, each
        row tagged with its channel), every row with its cosine computed in the server:
        one round trip, and no vector leaves the database. Over a user's own partitions
        outside row-level security, the keyword channel is a second statement, run at
        the same time on another connection (self._beside). The limits are written into
        the statement: a generic plan (_Tables.own) costs ``LIMIT $n`` as a tenth of the
        rows, where reading an index in order to the limit is the plan wanted."""
        q = self._vector(vector)
        where, params = self._where(user_id, flt)
        t = self._tables(user_id, under_rls=True)
        memories = f"{t.memories} AS memories"

        def tagged(via: str) -> str:
            return f", 1 - (embedding <=> %s) AS sim, '{via}' AS via"

        def with_stats(inner: str) -> str:  # the rows of every channel's statement
            return _with_stats(inner, ", r.sim, r.via, r.rank_", stats=t.memory_stats)

        branches = [
            f"(SELECT {_MEMORY_TABLE_COLS}{tagged('v')}, 0::float8 AS rank_ FROM {memories} "
            f"WHERE {where} AND embedding IS NOT NULL ORDER BY embedding <=> %s "
            f"LIMIT {int(knn_k)})"
        ]
        args: list[Any] = [q, *params, q]
        text = search_text(query)
        generic = t.own and self._alone_in(user_id, t)
        beside: Future[list[tuple[Any, ...]]] | None = None
        if text is not None and keyword_k > 0:
            kw_sql, kw_params = self._keyword_select(user_id, text, keyword_k, flt,
                                                     tagged("k"), [q], t)
            if t.own and current_actor() is None:
                # Beside the other channels, on a connection of its own (self._beside).
                # Not under row-level security: there the second statement's settings
                # cost what the overlap saves (ab.py --team: p50 -0.3, p99 +0.1 ms).
                beside = self._beside.submit(
                    contextvars.copy_context().run, self._q_beside, t, with_stats(kw_sql),
                    (*kw_params, user_id), generic)
            else:
                branches.append(f"({kw_sql})")
                args += kw_params
        if entities and entity_k > 0:
            branches.append(
                f"(SELECT {_MEMORY_TABLE_COLS}{tagged('e')}, 0::float8 FROM {memories} "
                f"WHERE {where} "
                f"AND memory_id IN (SELECT e.memory_id FROM {t.memory_entities} e "
                "WHERE e.user_id = %s AND e.entity = ANY(%s)) "
                f"ORDER BY importance DESC, memory_id LIMIT {int(entity_k)})"
            )
            args += [q, *params, user_id, list(entities)]
        if frequent_k > 0:
            g_where, g_params = self._where(user_id, replace(flt, scope=Scope.GLOBAL))
            branches.append(
                f"(SELECT {_MEMORY_TABLE_COLS}{tagged('f')}, 0::float8 FROM {_accessed(t)} "
                f"WHERE {g_where} ORDER BY hits DESC, memory_id LIMIT {int(frequent_k)})"
            )
            args += [q, *g_params]
        try:
            rows = self._q_in(t, with_stats(" UNION ALL ".join(branches)),
                              (*args, user_id), generic=generic)
        except BaseException:
            if beside is not None:
                beside.cancel()
            raise
        if beside is not None:
            rows += beside.result()
        top = max((float(r[-1]) for r in rows if r[-2] == "k"), default=0.0) or 1.0
        mems: dict[str, Memory] = {}
        sims: dict[str, float] = {}
        keyword: dict[str, float] = {}
        by_entity: set[str] = set()
        for r in rows:
            mid = r[0]
            if mid not in mems:
                mems[mid] = self._memory(r)
                sims[mid] = float(r[-3]) if r[-3] is not None else 0.0
            if r[-2] == "k":
                keyword[mid] = float(r[-1]) / top
            elif r[-2] == "e":
                by_entity.add(mid)
        return {mid: Found(mem, sims[mid], keyword.get(mid, 0.0), mid in by_entity)
                for mid, mem in mems.items()}

    def memories_by_entities(
        self, user_id: str, entities: Sequence[str], k: int, flt: MemoryFilter
    ) -> list[Memory]:
        if not entities:
            return []
        where, params = self._where(user_id, flt)
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE {where} AND memory_id IN "
            "(SELECT e.memory_id FROM memory_entities e WHERE e.user_id = %s "
            "AND e.entity = ANY(%s)) ORDER BY importance DESC, memory_id LIMIT %s",
            (*params, user_id, list(entities), k),
        )
        return [self._memory(r) for r in rows]

    def get_memory_vectors(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, Vector]:
        if not memory_ids:
            return {}
        rows = self._q(
            "SELECT memory_id, embedding FROM memories WHERE user_id = %s "
            "AND memory_id = ANY(%s) AND embedding IS NOT NULL",
            (user_id, list(memory_ids)),
        )
        return {mid: cast(Vector, _array(v)) for mid, v in rows}

    def record_access(self, user_id: str, hits: Sequence[AccessHit], now: float) -> None:
        """One statement for all of ``hits``: a gathered access job names hundreds of
        memories (500 compiles at the scale benchmark's target: 12 jobs, run in 1.08 s
        with one UPDATE per memory, 0.40 s with this one)."""
        totals = access_totals(hits)
        if not totals:
            return
        self._x(
            "UPDATE memory_stats AS s SET access_count = s.access_count + h.n, "
            "last_accessed_at = %s, relevance_accumulator = s.relevance_accumulator + h.rel "
            "FROM unnest(%s::text[], %s::int[], %s::float8[]) AS h (mid, n, rel) "
            "WHERE s.user_id = %s AND s.memory_id = h.mid",
            (now, list(totals), [n for n, _ in totals.values()],
             [rel for _, rel in totals.values()], user_id),
        )

    def max_access_count(self, user_id: str) -> int:
        rows = self._q(
            "SELECT max(access_count) FROM memory_rows WHERE user_id = %s AND is_active",
            (user_id,),
        )
        return int(rows[0][0] or 0)

    def memory_users(self) -> list[str]:
        return [r[0] for r in self._q("SELECT DISTINCT user_id FROM memories ORDER BY user_id")]

    # -- facts -----------------------------------------------------------------------
    def get_facts(
        self, user_id: str, workspaces: tuple[str, ...] | None = None,
        active_only: bool = True, category: str | None = None, key: str | None = None,
    ) -> list[Fact]:
        clauses = ["user_id = %s"]
        params: list[Any] = [user_id]
        if active_only:
            clauses.append("is_active")
        if workspaces is not None:
            clauses.append("workspace = ANY(%s)")
            params.append(list(workspaces))
        if category is not None:
            clauses.append("category = %s")
            params.append(category)
        if key is not None:
            clauses.append("key = %s")
            params.append(key)
        rows = self._q(
            f"SELECT {_FACT_COLS} FROM facts WHERE {' AND '.join(clauses)} "
            "ORDER BY importance DESC, category, key, created_at, fact_id",
            params,
        )
        return [self._fact(r) for r in rows]

    def insert_fact(self, fact: Fact) -> Fact:
        f = fact
        self._x(
            f"INSERT INTO facts ({_FACT_COLS}) VALUES ({', '.join(['%s'] * 14)})",
            (f.id, f.user_id, f.category, f.key, f.value, f.confidence, f.importance,
             f.created_at, f.updated_at, _ws(f.workspace), f.is_active, f.superseded_by,
             f.source_message_id, Jsonb(f.metadata)),
        )
        return fact

    def supersede_fact(self, user_id: str, fact_id: str, by: str, now: float) -> None:
        self._x(
            "UPDATE facts SET is_active = false, superseded_by = %s, updated_at = %s "
            "WHERE user_id = %s AND fact_id = %s",
            (by, now, user_id, fact_id),
        )

    # -- entities --------------------------------------------------------------------
    def link_entities(self, user_id: str, memory_id: str, entities: Sequence[str]) -> None:
        self._many(
            "INSERT INTO memory_entities (user_id, entity, memory_id) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [(user_id, e, memory_id) for e in dict.fromkeys(entities)],
        )

    # -- calls -----------------------------------------------------------------------
    def record_call(
        self, call_id: str, user_id: str, session_id: str | None, workspace: str | None,
        model: str | None, now: float, report: dict[str, Any], status: int | None = None,
    ) -> None:
        self._x(
            "INSERT INTO calls (call_id, user_id, session_id, workspace, model_id, created_at, "
            "status, report) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (call_id, user_id, session_id, _ws(workspace), model, now, status, Jsonb(report)),
        )

    def finish_call(self, call_id: str, status: int, metadata: dict[str, Any]) -> None:
        self._x("UPDATE calls SET status = %s, metadata = %s WHERE call_id = %s",
                (status, Jsonb(metadata), call_id))

    def get_call(self, user_id: str, call_id: str) -> dict[str, Any] | None:
        rows = self._q(f"SELECT {CALL_COLUMNS} FROM calls WHERE user_id = %s "
                       "AND call_id = %s", (user_id, call_id))
        return call_record(rows[0], user_id) if rows else None

    def list_calls(
        self, user_id: str, *, session_id: str | None = None, workspace: str | None = None,
        since: float | None = None, until: float | None = None, limit: int = 50,
    ) -> list[dict[str, Any]]:
        sql, params = calls_query(
            user_id, mark="%s", session_id=session_id,
            workspace=None if workspace is None else _ws(workspace),
            since=since, until=until, limit=limit,
        )
        return [call_record(r, user_id) for r in self._q(sql, params)]

    # -- usage -----------------------------------------------------------------------
    def record_usage(self, usage: Usage) -> None:
        u = usage
        self._x(
            "INSERT INTO usage_log (usage_id, user_id, session_id, workspace, model_id, "
            "prompt_tokens, completion_tokens, cost_microcents, latency_ms, created_at, "
            "metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (u.id, u.user_id, u.session_id, _ws(u.workspace), u.model, u.prompt_tokens,
             u.completion_tokens, u.cost_microcents, u.latency_ms, u.created_at,
             Jsonb(u.metadata)),
        )

    def list_usage(self, user_id: str, limit: int = 100) -> list[Usage]:
        rows = self._q(
            "SELECT usage_id, user_id, created_at, session_id, workspace, model_id, "
            "prompt_tokens, completion_tokens, cost_microcents, latency_ms, metadata "
            "FROM usage_log WHERE user_id = %s ORDER BY created_at DESC, usage_id LIMIT %s",
            (user_id, limit),
        )
        return [
            Usage(id=r[0], user_id=r[1], created_at=r[2], session_id=r[3], workspace=_unws(r[4]),
                  model=r[5], prompt_tokens=r[6], completion_tokens=r[7],
                  cost_microcents=r[8], latency_ms=r[9], metadata=r[10])
            for r in rows
        ]

    # -- jobs ------------------------------------------------------------------------
    def enqueue_job(
        self, kind: str, payload: dict[str, Any], user_id: str | None, now: float,
        run_after: float | None = None,
    ) -> str:
        job_id = uuid.uuid4().hex
        with self._txn(savepoint=False) as conn:  # a fresh id: no Conflict to go on from
            conn.execute(
                "INSERT INTO jobs (job_id, kind, user_id, payload, run_after, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (job_id, kind, user_id, Jsonb(payload),
                 now if run_after is None else run_after, now),
            )
        return job_id

    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        # SKIP LOCKED: daemons sharing the database never claim the same job twice.
        rows = self._txn_rows(
            "WITH due AS (SELECT job_id FROM jobs WHERE status = 'pending' "
            "AND run_after <= %s AND (lease_until IS NULL OR lease_until <= %s) "
            "ORDER BY run_after, created_at LIMIT %s FOR UPDATE SKIP LOCKED) "
            "UPDATE jobs j SET lease_until = %s, attempts = j.attempts + 1 FROM due "
            f"WHERE j.job_id = due.job_id RETURNING {_JOB_RETURNING}",
            (now, now, limit, now + lease_seconds),
        )
        jobs = [self._job(r) for r in rows]
        return sorted(jobs, key=lambda j: (j.run_after, j.created_at, j.id))

    def _txn_rows(self, query: Any, params: Params) -> list[tuple[Any, ...]]:
        """Rows of a writing statement (``RETURNING``), in a transaction."""
        with self._txn() as conn:
            return conn.execute(query, params).fetchall()

    def complete_job(self, job_id: str) -> None:
        self._x("DELETE FROM jobs WHERE job_id = %s", (job_id,))

    def fail_job(self, job_id: str, error: str, retry_at: float | None) -> None:
        if retry_at is None:
            self._x(
                "UPDATE jobs SET status = 'dead', last_error = %s, lease_until = NULL "
                "WHERE job_id = %s", (error, job_id),
            )
        else:
            self._x(
                "UPDATE jobs SET last_error = %s, run_after = %s, lease_until = NULL "
                "WHERE job_id = %s", (error, retry_at, job_id),
            )

    def pending_jobs(self) -> int:
        return int(self._q("SELECT count(*) FROM jobs WHERE status = 'pending'")[0][0])

    # -- embedding cache -------------------------------------------------------------
    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        if not hashes:
            return {}
        rows = self._q(
            "SELECT content_hash, vector FROM embedding_cache WHERE model = %s "
            "AND content_hash = ANY(%s)",
            (model, list(dict.fromkeys(hashes))),
        )
        return {h: bytes(v) for h, v in rows}

    def put_cached_embeddings(self, model: str, items: Sequence[tuple[str, bytes]]) -> None:
        self._many(
            "INSERT INTO embedding_cache (model, content_hash, vector) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [(model, h, v) for h, v in items],
        )

    # -- bulk ------------------------------------------------------------------------
    def iter_memories(self, user_id: str | None = None) -> Iterator[Memory]:
        # Keyset pages in primary-key order: each page is an index range scan.
        last = ("", "")
        while True:
            if user_id is None:
                rows = self._q(
                    f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE (user_id, memory_id) > (%s, %s) "
                    "ORDER BY user_id, memory_id LIMIT 500", last,
                )
            else:
                rows = self._q(
                    f"SELECT {_MEMORY_COLS} FROM memory_rows WHERE user_id = %s "
                    "AND memory_id > %s ORDER BY memory_id LIMIT 500", (user_id, last[1]),
                )
            if not rows:
                return
            for r in rows:
                yield self._memory(r)
            last = (rows[-1][1], rows[-1][0])

    def expire_memories(self, now: float) -> int:
        return self._x(
            "UPDATE memories SET is_active = false, updated_at = %s WHERE is_active "
            "AND expires_at IS NOT NULL AND expires_at <= %s",
            (now, now),
        )

    def expire_sessions(self, now: float) -> int:
        # The session sweep also keeps next months' history partitions ready (wall clock);
        # a failure (e.g. a lock timeout under load) is retried by the next sweep.
        if self._current() is None and _month(time.time()) != self._history_month:
            try:
                self.ensure_history_partitions(time.time())
            except StorageError as exc:
                log.warning("history partitions not extended (next sweep retries): %s", exc)
        return self._x(
            "UPDATE sessions SET status = %s, updated_at = %s WHERE expires_at IS NOT NULL "
            "AND expires_at <= %s AND status <> %s",
            (int(SessionStatus.EXPIRED), now, now, int(SessionStatus.EXPIRED)),
        )

    def delete_session_working_memory(self, user_id: str, session_id: str) -> int:
        return self._delete_memories(user_id, "session_id = %s AND memory_tier = 0",
                                     (session_id,))
