"""The PostgreSQL store: every role of the Store protocol over one database, composed of
the connection (pools, row-level security, partition routing) and one part per role."""

from __future__ import annotations

from memd.backends.base import StoreClass
from memd.backends.common.composed import ComposedStore
from memd.backends.postgres.erasure import PostgresErasure
from memd.backends.postgres.memories import PostgresMemories
from memd.backends.postgres.messages import PostgresMessages
from memd.backends.postgres.partitions import PostgresPartitions, PostgresSessions
from memd.backends.postgres.queue import PostgresEmbeddingCache, PostgresJobs
from memd.backends.postgres.vectors import PostgresVectorCache
from memd.config import Settings


class PostgresStore(ComposedStore):
    """The Store protocol over one PostgreSQL database (pgvector and pg_trgm required).

    ``partitions`` are the hash partition counts of (sessions, memories, history) used when
    the schema is first created; an existing database keeps the counts it was made with.
    """

    #: The ``db`` settings it opens, as the error for an unknown one lists them.
    db_forms = "a postgresql:// URL"

    @classmethod
    def opens(cls, db: str) -> bool:
        return db.startswith(("postgresql://", "postgres://"))

    @classmethod
    def from_settings(cls, settings: Settings, dim: int) -> PostgresStore:
        return cls(settings.db, dim=dim, partitions=settings.pg_partitions,
                   connect_timeout=settings.pg_connect_timeout)

    def __init__(
        self, dsn: str, dim: int = 384, partitions: tuple[int, int, int] = (256, 256, 512),
        *, pool_size: int = 8, side_pool_size: int = 4, connect_timeout: float = 2.0,
    ) -> None:
        self.connection = conn = PostgresPartitions(
            dsn, dim, partitions, pool_size=pool_size, side_pool_size=side_pool_size,
            connect_timeout=connect_timeout)
        self.database = conn.database
        self.partitions = conn.partitions
        self.memories = PostgresMemories(conn)
        self.erasure = PostgresErasure(conn)
        self.messages = PostgresMessages(conn)
        super().__init__(
            conn, sessions=PostgresSessions(conn), messages=self.messages,
            memories=self.memories, jobs=PostgresJobs(conn), erasure=self.erasure,
            embeddings=PostgresEmbeddingCache(conn), vectors=PostgresVectorCache())


# Checked where the contract is made: the type checker holds this class to the protocol
# the registry hands out (each part is held to its role where it is handed over above).
_REGISTERED: StoreClass = PostgresStore
