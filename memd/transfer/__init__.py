"""``memd export`` and ``memd import``: a store as one JSONL file, and back.

The file is a header line, one line per row, and a trailer line::

    {"format": "memd-export", "version": 1, "source": "sqlite", "dim": 384,
     "originals": false, "note": "...", "tables": [{"name", "key", "columns"}, ...]}
    {"table": "messages", "row": {"message_id": "...", "content": "...", ...}}
    ...
    {"end": "memd-export", "tables": {"messages": {"rows": 120, "checksum": "..."}, ...}}

What is exported is memd migrate's declared table list (:data:`memd.migrate.TABLES`), in
its order, each table's rows in key order, every stored column of each: the same input
always gives the same bytes, so two exports compare with ``cmp``. Values are written as
the backend stores them: vectors (merged in from sqlite-vec's tables on SQLite) as base64
of their little-endian float32 bytes, bytes as base64, PostgreSQL's jsonb as JSON, and
everything else as the JSON value it is (floats exactly, by their shortest repr). What a
backend derives (full-text indexes and tsvectors, sqlite-vec's tables) is not exported;
an import rebuilds it, so search works on an imported store. An export names its backend
and imports into a store of the same kind: moving a SQLite store into PostgreSQL is what
``memd migrate`` does.

The trailer holds each table's row count and checksum, computed as memd migrate computes
them (:mod:`memd.migrate.canon`: sha256 over the sorted digests of the rows' canonical
forms) over the rows as the file holds them. An import reads the whole file first and
checks its format, version, shape and checksums, so a truncated or damaged file is
refused before anything is written. It then digests the store's rows with the file's keys:
a different row under the same key stops the import before anything is written (memd
import never overwrites); an identical one is skipped, so a rerun is harmless. After
writing, the store's rows with the file's keys are digested again and must give the
trailer's checksums.

Secrets: a stored message keeps what the client sent (``content``) and, when the
sanitizer replaced something, a ``sanitized`` copy; everything derived reads the
sanitized text (memd.privacy). An export is a file that leaves the store (backups get
copied, files get attached to bug reports), so by default it writes each message's
sanitized text in place of its original, and its header says so (``"originals": false``
and a note). With ``originals=True`` (``memd export --originals``) it writes the originals
too: a full backup, or a move to another machine. Both forms round-trip (export, import
into an empty data dir, export again gives the same bytes); a redacted export imports as
a store whose messages hold their sanitized text, and ``memd import`` says so. Comparing
a redacted file with a store, the store's rows are redacted the same way, so a redacted
backup of a store imports into that store as a no-op.

Concurrency: an export reads one snapshot (SQLite: one read transaction, which WAL keeps
consistent while a daemon writes; PostgreSQL: one REPEATABLE READ transaction), so it is
safe beside a running daemon. ``memd import`` refuses to run while a daemon serves the
data dir: the daemon caches what it has read (vectors, histories) and would not see rows
written under it. Into SQLite the rows go in one transaction; into PostgreSQL in batches
of one user's rows each, as memd migrate copies, so a failed import leaves complete
batches behind and its rerun writes the rest.

The package: ``lines`` (the file: header, rows, trailer, the check of a whole file),
``sqlite`` and ``postgres`` (reading and writing each backend), ``run`` (:func:`export_store`
and :func:`import_store`).
"""

from __future__ import annotations

from memd.transfer.run import Summary, TableCount, export_store, import_store

__all__ = ["Summary", "TableCount", "export_store", "import_store"]
