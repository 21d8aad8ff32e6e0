"""The team backend: PostgreSQL + pgvector + pg_trgm, every per-user table hash-partitioned
by user_id (the schema is sql/postgres/).

Same semantics and same dataclasses as :mod:`memd.backends.sqlite`, the reference
implementation. The store is composed (:mod:`.store`): it has the connection (pools and
row-level security, :mod:`.connection`, with partition routing, :mod:`.partitions`; the
schema and its migrations in :mod:`.schema`) and one part per role, each built on the
connection: messages, memories (with full text and the candidate channels), sessions,
erasure, the job queue and the embedding cache (:mod:`.queue`) here, the parts whose SQL
both backends share in :mod:`memd.backends.common`.
"""

try:
    import pgvector.psycopg  # noqa: F401
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # the registry reports it when a PostgreSQL URL is given
    from memd.extras import missing

    raise ImportError(str(missing("postgres", exc.name)), name=exc.name) from exc

from memd.backends.postgres.partitions import PARENTS, Tables
from memd.backends.postgres.queries import search_text
from memd.backends.postgres.store import PostgresStore

__all__ = ["PARENTS", "PostgresStore", "Tables", "search_text"]
