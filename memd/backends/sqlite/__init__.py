"""The embedded SQLite backend: apsw + sqlite-vec + FTS5, one file per data dir.

apsw is used because it bundles a current SQLite with FTS5 and can load extensions on
every Python build (the stdlib ``sqlite3`` here cannot). One connection per store,
guarded by a re-entrant lock (:mod:`.connection`); a read-only side connection ranks the
memory keyword channel while the caller runs the vector channel (:mod:`.fulltext`);
WAL lets a CLI process and the daemon share the file. ``secure_delete`` is on so that
forgetting leaves no readable bytes behind.

The store is composed (:mod:`.store`): it has the connection and its checkpoints
(:mod:`.connection`), the vector caches (:mod:`.vectors`), and one part per role, each
built on the connection: messages, memories, erasure, the job queue and the embedding
cache (:mod:`.queue`) here, the parts whose SQL both backends share in
:mod:`memd.backends.common`.
"""

from memd.backends.sqlite.cipher import connect, encrypt, is_encrypted
from memd.backends.sqlite.fulltext import fts_query, fts_text, user_mark
from memd.backends.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore", "connect", "encrypt", "fts_query", "fts_text", "is_encrypted",
           "user_mark"]
