"""``memd migrate``: copy a SQLite data dir into PostgreSQL, exactly, resumably.

What is copied is one declared list, :data:`TABLES`, in foreign-key order. An entry names a
table, the columns that identify a row (its key as PostgreSQL sees it: user_id first on the
per-user tables) and only what differs from a column-for-column copy; a plain table is one
line. A table is copied only if the source has it.

Column conversions follow from the target column's type, read from PostgreSQL's catalog:
INTEGER 0/1 -> boolean; JSON TEXT -> jsonb (the text is handed to PostgreSQL unchanged);
JSON array TEXT -> text[]; sqlite-vec float32 blobs (``vectors=``, read from the vec0 table
in key order and merged) -> vector; BLOB -> bytea; REAL epoch seconds -> double precision
(both schemas keep float epoch seconds); integers and text as they are. Both schemas store
"no workspace" as '' (a table whose schemas disagreed would say so with ``exprs=``, e.g.
``{"workspace": "nullif(t.workspace, '')"}``). A source column with no target column stops
the run unless the entry ``skip``s it (derived on PostgreSQL: messages.has_embedding is
``embedding IS NOT NULL`` there); generated columns (the tsvectors) are PostgreSQL's; a
target column the source lacks keeps its default. Messages land in monthly partitions
(``monthly=``): the month partitions of every month the source's history covers are made
before copying, or the rows would sit in the DEFAULT partitions.

How a run goes, and why it can be killed and rerun:

1. schema: first the target records a copy under way (``schema_meta``'s
   ``migrate.copying``, deleted once the copy is verified; ``memd serve`` refuses a
   target that has it, so a run killed even before its first row leaves no database that
   looks whole), then :class:`PostgresStore` creates or migrates the target schema as
   ``memd serve`` would (for a new database most of a small copy's time: the production
   layout's thousands of partitions), then the history's month partitions are made.
2. plan: one pass over each source table digests every row (sha256 of its canonical form,
   below); the target rows with the same keys are read (the keys go into a temp table and
   are joined) and digested the same way. A key whose target row differs is a conflict:
   the run stops before writing anything. Keys missing from the target are what to copy.
3. copy: the missing rows stream through binary COPY in batches, one transaction each,
   each batch one user's rows (so it routes to that user's partitions only: a batch
   spread over a production layout's thousands of leaves would exhaust the lock table,
   as would any query that does not name its user). A killed run loses only its open
   batch; the next run's plan derives the resume point from what the target holds, so
   it copies exactly the rest, and a complete target makes a run that copies nothing and
   says so. (Preferred to a staging table with ON CONFLICT DO NOTHING: the plan reads the
   target anyway, to catch conflicts before writing, and COPY straight into the table is
   faster. A concurrent writer of the same keys fails its batch with a unique violation,
   reported as a conflict.) A table's rows under its ``own_prefix`` (the scheduler's
   recurring jobs) are the target's own where it has them, made by a daemon that served
   it: those are kept, neither compared nor copied, and the report counts them.
   Copying into an empty table with a small partition tree drops
   its vector indexes first and builds them after the last batch (HNSW builds much faster
   in bulk); their definitions wait in schema_meta, so a killed run's rerun rebuilds them.
4. verify: per table, the row counts and a checksum of each side: sha256 over the sorted
   row digests of the source rows, and of the target rows with the source's keys.

The canonical form of a row is the JSON list of its column values after conversion: ints,
floats (repr, exact), text, booleans, null; jsonb and JSON text parsed with numbers as
normalized decimals (1.50 == 1.5, as jsonb compares them) and every value tagged with its
JSON type; text[] as a list; vectors as sha256 of their float32 little-endian bytes and
bytea as hex. Both sides go through the same functions, so equal checksums mean equal
content, embeddings included.

The package: ``tables`` (what is copied, :data:`TABLES`), ``canon`` (column conversions
and the canonical form), ``source`` (reading SQLite), ``target`` (reading and writing
PostgreSQL), ``run`` (plan, copy and verify: :func:`migrate`). This module re-exports
the public names.
"""

from __future__ import annotations

from memd.migrate.canon import checksum
from memd.migrate.run import Progress, Result, TableResult, migrate
from memd.migrate.tables import TABLES, Table, VectorSource

__all__ = ["TABLES", "Progress", "Result", "Table", "TableResult", "VectorSource", "checksum",
           "migrate"]
