"""The SQLite schema: sql/sqlite/NNN_*.sql applied in order, each in a transaction of its
own, on the store's connection when it opens."""

from __future__ import annotations

import threading

import apsw

from memd.backends.common.migrations import check_dim, pending
from memd.errors import MigrationError


def migrate(db: apsw.Connection, lock: threading.RLock, path: str, dim: int) -> None:
    """Bring the database at ``path`` (open as ``db``) to the current schema."""
    with lock, db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, applied_at REAL NOT NULL DEFAULT (unixepoch('subsec')))"
        )
        db.execute("CREATE TABLE IF NOT EXISTS schema_meta (key TEXT PRIMARY KEY, value TEXT)")
        row = db.execute("SELECT value FROM schema_meta WHERE key = 'dim'").fetchone()
        check_dim(None if row is None else str(row[0]), dim, path, "data dir")
        applied = {int(v) for (v,) in db.execute("SELECT version FROM schema_migrations")}
    for migration in pending("sqlite", applied, path):
        try:
            with lock, db:
                db.execute(migration.text({"{dim}": str(dim)}))
                db.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                           (migration.version, migration.name))
                db.execute("INSERT OR REPLACE INTO schema_meta (key, value) VALUES ('dim', ?)",
                           (str(dim),))
        except apsw.Error as exc:
            raise MigrationError(f"migration {migration.name} failed: {exc}") from exc
