"""The team backend: PostgreSQL + pgvector + pg_trgm, every per-user table hash-partitioned
by user_id (the schema is sql/postgres/).

Same semantics and same dataclasses as :mod:`memd.backends.sqlite`, the reference
implementation. The store is built in layers, each a module: the connections, pools and
row-level security (:mod:`.connection`), the schema and its migrations (:mod:`.schema`),
partition routing (:mod:`.partitions`), full text (:mod:`.fulltext`), vectors and the
candidate channels (:mod:`.vectors`), messages, memories, and the store itself; the SQL
both backends share is in :mod:`memd.backends.common`.
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
