"""PostgreSQL partition routing: every per-user table is hash-partitioned by user_id
(sql/postgres/001_core.sql), so every per-user query names user_id and is pruned to one
partition; working memory (tier 0) sits in UNLOGGED leaves. Outside row-level security a
statement may name a user's own partitions instead of the parents, and then run a
prepared generic plan on a pool of its own. The history's monthly partitions are kept
ready by the session sweep (:meth:`PostgresPartitions.expire_sessions`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from memd.auth import current_actor
from memd.backends.common.sessions import Sessions
from memd.backends.postgres.connection import Params, PostgresConnection, driver_error
from memd.backends.postgres.schema import HISTORY_MONTHS, add_history_months, month
from memd.errors import StorageError

log = logging.getLogger("memd.postgres")

# Seconds PostgresPartitions._sole_owner's answer is kept.
SOLE_OWNER_TTL = 60.0

# PostgreSQL's hash partitioning (partbounds.c, compute_partition_hash_value): a row goes
# to partition (hashtextextended(key, seed) + combine) mod 2^64 mod modulus.
HASH_SEED = 0x7A5B22367996DCFD
HASH_COMBINE = 0x49A0F4DD15E5A8E3


@dataclass(frozen=True, slots=True)
class Tables:
    """What a statement over one user's rows reads: the partitioned parents (under
    row-level security, whose policies bind the parents, and inside a transaction), or
    that user's own partitions (``own``). A statement over parents is planned for every
    call (custom plans: a generic one would lock every partition of the layout); one over
    a user's own partitions names a few tables only, so it is prepared once per pooled
    connection and runs its generic plan without planning again (see _rows_in)."""

    memories: str = "memories"
    memory_stats: str = "memory_stats"
    memory_entities: str = "memory_entities"
    messages: str = "messages"
    memory_leaves: tuple[str, ...] = ()  # the two partitions ``memories`` reads (own)

    @property
    def own(self) -> bool:
        return bool(self.memory_leaves)


PARENTS = Tables()


def own_tables(key_hash: int, partitions: tuple[int, int, int]) -> Tables:
    """The partitions holding the rows of the user whose partition key hashes (with
    hashtextextended and HASH_SEED) to ``key_hash``, in sql/postgres/001_core.sql's
    layout (<parent>_pNNN; memories is split by tier first, then hashed)."""
    def leaf(parent: str, modulus: int) -> str:
        return f"{parent}_p{(key_hash + HASH_COMBINE) % 2**64 % modulus:03d}"

    m, h = partitions[1], partitions[2]
    working, durable = leaf("memories_working", m), leaf("memories_durable", m)
    return Tables(
        memories=f"(SELECT * FROM {working} UNION ALL SELECT * FROM {durable})",
        memory_stats=leaf("memory_stats", m), memory_entities=leaf("memory_entities", m),
        messages=leaf("messages", h), memory_leaves=(working, durable),
    )


class PostgresPartitions(PostgresConnection):
    """The connection with the routing of each user's statements to their partitions."""

    def __init__(
        self, dsn: str, dim: int = 384, partitions: tuple[int, int, int] = (256, 256, 512),
        *, pool_size: int = 8, side_pool_size: int = 4, connect_timeout: float = 2.0,
    ) -> None:
        self._own: dict[str, Tables] = {}  # user id -> its partitions
        self._sole_owners: dict[str, tuple[bool, float]] = {}  # user id -> (sole, until)
        super().__init__(dsn, dim, partitions, pool_size=pool_size,
                         side_pool_size=side_pool_size, connect_timeout=connect_timeout)

    def tables(self, user_id: str, *, under_rls: bool = False) -> Tables:
        """Where to read ``user_id``'s rows: their own partitions when no row-level
        security applies and the thread's connection is in no transaction (its writes
        would not be seen from another connection; a read batch's is not in one); the
        parents otherwise. ``under_rls``: the caller reads only tables whose leaves
        carry row-level security of their own (sql/postgres/009), so a request acting as
        ``user_id`` itself reads that user's partitions too, in its transaction. Which
        partitions is asked of the server once per user (its hash function), then
        kept."""
        conn = self.current()
        actor = current_actor()
        if actor is not None:
            if not (under_rls and actor == user_id):
                return PARENTS
        elif conn is not None and conn.info.transaction_status != TransactionStatus.IDLE:
            return PARENTS
        tables = self._own.get(user_id)
        if tables is None:
            (key_hash,), = self.rows("SELECT hashtextextended(%s, %s)", (user_id, HASH_SEED))
            tables = own_tables(int(key_hash), self.partitions)
            if len(self._own) >= 10_000:
                self._own.clear()
                self._sole_owners.clear()
            self._own[user_id] = tables
        return tables

    def sole_owner(self, user_id: str, tables: Tables) -> bool:
        """Whether ``user_id`` is the only user with rows in their memory partitions
        (asked again after SOLE_OWNER_TTL seconds). Only then does a generic plan serve
        the memory statements: it cannot see what share of a partition's rows a user
        holds. A custom plan reads a small share through the user_id index and sorts it;
        the generic plan would walk the HNSW graph past the other users' rows."""
        now = time.monotonic()
        known = self._sole_owners.get(user_id)
        if known is None or now >= known[1]:
            only = " AND ".join(
                f"(SELECT coalesce(min(user_id) = %(u)s AND max(user_id) = %(u)s, true) "
                f"FROM {leaf})" for leaf in tables.memory_leaves)
            try:  # as the owner, outside any request's row-level security (which
                # would show only the user's own rows, so always "sole")
                with self._own_pool.connection() as conn:
                    (sole,), = conn.execute(f"SELECT {only}", {"u": user_id}).fetchall()
            except psycopg.Error as exc:
                raise driver_error(exc) from exc
            known = self._sole_owners[user_id] = (bool(sole), now + SOLE_OWNER_TTL)
        return known[0]

    def rows_in(self, tables: Tables, query: str, params: Params, generic: bool = True
                 ) -> list[tuple[Any, ...]]:
        """_rows for a statement over ``tables``: one over a user's own partitions runs on
        the pool whose connections prepare statements and keep their generic plans,
        unless ``generic`` is false (then it is planned for each call, as over parents)."""
        if not (tables.own and generic):
            return self.rows(query, params)
        if current_actor() is not None:
            return self.rows(query, params, generic=True)
        try:
            with self._own_pool.connection() as conn:
                return conn.execute(query, params, binary=True).fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    def side_rows(self, tables: Tables, query: str, params: Params, generic: bool
                   ) -> list[tuple[Any, ...]]:
        """_rows_in on a worker thread of self.side_workers: on a connection of the own
        pool or the side pool, never of the main pool, which the request thread waiting
        for it may hold (a read batch)."""
        with self.side_reads():
            return self.rows_in(tables, query, params, generic)

    def ensure_history_partitions(self, now: float, months: int = HISTORY_MONTHS) -> int:
        """Create the monthly history partitions for the ``months`` months from ``now``'s
        (every hash partition), in short transactions of their own; returns how many were
        made. Runs at start and from the session sweep when the month changes. Not inside a
        transaction: the DDL would wait for that transaction's own locks."""
        if self.current() is not None:
            raise StorageError("ensure_history_partitions() runs outside a transaction")
        try:
            with self._pool.connection() as conn:
                made = add_history_months(conn, now, months)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        self._history_month = month(now)
        return made

    def keep_history_partitions_ready(self) -> None:
        """At the session sweep: make next months' history partitions (wall clock) once
        the month changed; a failure (e.g. a lock timeout under load) is retried by the
        next sweep."""
        if self.current() is None and month(time.time()) != self._history_month:
            try:
                self.ensure_history_partitions(time.time())
            except StorageError as exc:
                log.warning("history partitions not extended (next sweep retries): %s", exc)


class PostgresSessions(Sessions):
    """Sessions, whose sweep also keeps the next months' history partitions ready."""

    def __init__(self, conn: PostgresPartitions) -> None:
        super().__init__(conn)
        self._pg = conn

    def expire_sessions(self, now: float) -> int:
        self._pg.keep_history_partitions_ready()
        return super().expire_sessions(now)
