"""The Store protocol: everything the engine needs from a storage backend, one protocol
per role (sessions, messages, memories, facts, calls and usage, accounts, jobs, erasure,
the embedding cache) composed into :class:`Store`.

A backend is one package that implements this protocol over a real database and returns
the shared dataclasses of :mod:`memd.types`. It knows nothing of HTTP or models: vectors
arrive already computed (unit-length float32, ``dim`` entries), token counts arrive
already counted. Every method that takes a ``user_id`` touches only that user's rows,
which is what lets PostgreSQL route each call to one hash partition.

Writes that belong together run inside ``with store.transaction():``; a method called
outside one runs in its own transaction. Driver errors leave a backend as
:class:`memd.errors.StorageError` (or a more precise memd error), never raw.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

# Helpers both backends share, importable from here too.
from memd.backends.common.candidates import access_totals, compose_candidates
from memd.backends.common.fulltext import KEYWORD_INDEX_CHARS, keyword_part
from memd.backends.roles import (
    AccessHit,
    ContextObjectStore,
    FactStore,
    ForgottenStore,
    MemoryStore,
    MessageStore,
    ParagraphStore,
    ResponseStore,
    SessionStore,
    Vector,
    VectorCache,
)
from memd.backends.service_roles import (
    AccountStore,
    CallStore,
    EmbeddingCache,
    ErasureStore,
    JobQueue,
)
from memd.types import QueuedJob

if TYPE_CHECKING:
    from memd.config import Settings


class Lifecycle(Protocol):
    """Opening, transactions and how reads are grouped."""

    dim: int
    #: Whether side reads (``side_reads``) run in parallel with the caller's, on
    #: connections of their own (PostgreSQL: a pool of its own; SQLite: a read-only
    #: connection per worker thread, none for a database in memory).
    concurrent_reads: bool
    #: Whether a side thread's writes run on a connection of their own (PostgreSQL),
    #: rather than on the caller's, waiting for its lock (SQLite: one writer connection).
    concurrent_writes: bool

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[None]:
        """Group writes atomically; nests (inner blocks join the outer transaction)."""
        ...

    def in_transaction(self) -> bool:
        """Whether this thread is inside ``transaction()``: its uncommitted writes are
        invisible to other threads' connections (on SQLite, a thread reading on the
        store's own connection waits for the transaction to end), so the engine does its
        reads here rather than in side threads."""
        ...

    def side_reads(self) -> AbstractContextManager[None]:
        """Mark the reads of this thread, one of the engine's worker threads, as side
        reads. A request thread may hold a connection for its read batch while it waits
        for its worker, so on PostgreSQL side reads come from a pool of their own: with
        one shared pool, workers could wait for ever once request threads hold every
        connection. On SQLite they run on a read-only connection of the worker's own,
        without the store's lock, so they do not take turns with the request's."""
        ...

    def read_batch(self) -> AbstractContextManager[None]:
        """Run a group of reads (a context compile, a search) as one unit of work: on
        PostgreSQL one pooled connection instead of one per read, each read a statement
        of its own in one round trip (for an authenticated user, sent with row-level
        security's settings, which last until its end). A write inside is a transaction
        of its own that commits without waiting for its flush, so it is for best-effort
        bookkeeping (the access stats a compile enqueues): a server crash may lose the
        last ones, as SQLite's synchronous=NORMAL may. Inside a transaction it joins
        that transaction, which keeps its durability."""
        ...

    def schema_version(self) -> int: ...

    def unfinished_copy(self) -> list[str]:
        """The tables a ``memd migrate`` into this database has not finished copying (the
        run's record of a copy under way is still there, or their vector indexes, dropped
        for the bulk copy, are not built again yet); empty when there is none."""
        ...

    def check_row_security(self) -> None:
        """Raise :class:`memd.errors.StorageError` unless the database enforces what
        authenticated mode relies on beyond memd's own filters (PostgreSQL: the role and
        the row-level security policies); a store without row security checks nothing."""
        ...

    def ensure_history_partitions(self, now: float, months: int = 3) -> int:
        """Make the history's monthly partitions from ``now``'s month for ``months``
        months where missing (PostgreSQL; a store without them makes none); returns how
        many were made. Runs outside any transaction (scheduled:
        memd.engine.background.schedule)."""
        ...


@runtime_checkable
class Store(Lifecycle, SessionStore, MessageStore, MemoryStore, FactStore, ForgottenStore,
            ParagraphStore, ResponseStore, ContextObjectStore, CallStore, AccountStore,
            JobQueue, ErasureStore, EmbeddingCache, VectorCache, Protocol):
    """Storage for sessions, messages, memories, facts, entities, usage and jobs: every
    role above, over one database."""


class StoreClass(Protocol):
    """A registered store class, as :mod:`memd.registry` hands it out: it says which
    ``db`` settings it opens and opens one. Each backend assigns its class to this type,
    so the type checker holds the class, and the instances it makes, to :class:`Store`."""

    @property
    def db_forms(self) -> str:
        """The ``db`` settings it opens, as the error for an unknown one lists them."""
        ...

    def opens(self, db: str) -> bool: ...

    def from_settings(self, settings: Settings, dim: int) -> Store: ...


__all__ = [
    "KEYWORD_INDEX_CHARS", "AccessHit", "AccountStore", "CallStore", "ContextObjectStore",
    "EmbeddingCache", "ErasureStore", "FactStore", "ForgottenStore", "JobQueue", "Lifecycle",
    "MemoryStore", "MessageStore", "ParagraphStore", "QueuedJob", "ResponseStore",
    "SessionStore", "Store", "StoreClass",
    "Vector", "VectorCache", "access_totals", "compose_candidates", "keyword_part",
]
