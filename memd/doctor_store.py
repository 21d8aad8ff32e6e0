"""The store checks of ``memd doctor`` (:mod:`memd.doctor`): the SQLite file, opened
read-only, or the PostgreSQL server with pgvector, and the schema either holds: its
migrations, an unfinished ``memd migrate``, the vectors' dimension."""

from __future__ import annotations

from pathlib import Path

from memd.config import Settings
from memd.doctor import FAIL, OK, TIMEOUT, WARN, Check, megabytes
from memd.errors import MemdError


def store_check(settings: Settings) -> Check:
    from memd.registry import store_class, store_for

    try:
        sqlite = store_for(settings.db) is store_class("sqlite")
    except MemdError as exc:
        return Check("store", FAIL, str(exc), "memd serve --db sqlite, or --db "
                                              "postgresql://USER@HOST/DBNAME")
    return sqlite_check(settings) if sqlite else postgres_check(settings)


def _embedder_dim(settings: Settings) -> int | None:
    from memd.registry import embedder_class

    try:
        dim = getattr(embedder_class(settings.embedder), "dim", None)
    except MemdError:
        return None  # the embedder check says why
    return dim if isinstance(dim, int) else None


def _schema(applied: set[int], meta: dict[str, str], dialect: str, where: str,
            dim: int | None) -> tuple[str, str, str | None]:
    """(status, what the schema is, fix) of a store's recorded migrations and meta."""
    from memd.backends.common.migrations import COPYING_KEY, DEFERRED_INDEX_KEY, pending

    version = max(applied, default=0)
    # a killed memd migrate: what memd serve refuses to open
    if COPYING_KEY in meta or any(k.startswith(DEFERRED_INDEX_KEY) for k in meta):
        return FAIL, f"schema v{version}, an unfinished memd migrate", \
            "run the same memd migrate again to finish it"
    try:
        todo = pending(dialect, applied, where)
    except MemdError as exc:
        return FAIL, str(exc), "pip install --upgrade memd"
    if dim is not None and meta.get("dim") not in (None, str(dim)):
        return FAIL, f"schema v{version} holds {meta['dim']}-dim vectors, the embedder " \
                     f"makes {dim}-dim ones", "use the original embedder, or a new --data-dir"
    if todo:
        names = ", ".join(m.name for m in todo[:3]) + (" ..." if len(todo) > 3 else "")
        return WARN, f"schema v{version}, {len(todo)} migration(s) to apply ({names})", \
            "memd status (opening the store applies them)"
    return OK, f"schema v{version} (current)", None


def sqlite_check(settings: Settings) -> Check:
    path = settings.db_path
    try:
        import apsw
        import sqlite_vec
    except ImportError as exc:
        return Check("store", FAIL, f"SQLite at {path}: {exc}",
                     "pip install --force-reinstall apsw-sqlite3mc sqlite-vec==0.1.9")
    from memd.backends.sqlite import connect
    from memd.keys import key_for

    exists = path.is_file()
    try:
        key = key_for(settings.encryption, path) if exists else None
        db = connect(str(path) if exists else ":memory:", key,
                     flags=apsw.SQLITE_OPEN_READONLY)
    except MemdError as exc:
        return Check("store", FAIL, f"SQLite at {path}: {exc}",
                     "set encryption and its key as the message says (memd config show "
                     "prints the settings)")
    except apsw.Error as exc:
        return Check("store", FAIL, f"cannot open SQLite at {path}: {exc}",
                     "check the file's permissions, or move it away and start afresh")
    try:
        db.set_busy_timeout(int(TIMEOUT * 1000))
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
        row = db.execute("SELECT sqlite_version(), vec_version()").fetchone()
        assert row is not None
        found = f"SQLite {row[0]}, sqlite-vec {row[1]}" + (", encrypted" if key else "")
        if not exists:
            return Check("store", OK, f"{found}; {path} not created yet (the first start "
                                      "creates it)")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        applied = ({int(r[0]) for r in db.execute("SELECT version FROM schema_migrations")}
                   if "schema_migrations" in tables else set())
        meta = ({str(k): str(v) for k, v in db.execute("SELECT key, value FROM schema_meta")}
                if "schema_meta" in tables else {})
    except apsw.Error as exc:
        return Check("store", FAIL, f"SQLite at {path}: {exc}",
                     "pip install --force-reinstall apsw-sqlite3mc sqlite-vec==0.1.9; if "
                     "the file is damaged, restore it from a memd export")
    finally:
        db.close()
    status, schema, fix = _schema(applied, meta, "sqlite", str(path), _embedder_dim(settings))
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return Check("store", status, f"{found}; {path}, {megabytes(size)}, {schema}", fix)


def postgres_check(settings: Settings) -> Check:
    from memd.privacy.urls import redact_dsn

    try:
        import psycopg
    except ImportError as exc:
        from memd.extras import EXTRAS

        return Check("store", FAIL, f"PostgreSQL: {exc}",
                     EXTRAS["postgres"].install_command("postgres"))
    where = redact_dsn(settings.db)
    try:
        with psycopg.connect(settings.db, connect_timeout=int(TIMEOUT)) as conn:
            server = conn.execute("SHOW server_version").fetchone()
            vector = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            available = conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
            applied = ({int(r[0]) for r in conn.execute(
                "SELECT version FROM schema_migrations")}
                if "schema_migrations" in tables else set())
            meta = ({str(k): str(v) for k, v in conn.execute(
                "SELECT key, value FROM schema_meta")} if "schema_meta" in tables else {})
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Check("store", FAIL, f"cannot reach PostgreSQL, {where}: {reason}",
                     "start the database server, or check the host, port, user and "
                     "password of --db / MEMD_DB")
    found = f"PostgreSQL {server[0] if server else '?'}, {where}"
    if vector is None and available is None:
        return Check("store", FAIL, f"{found}: the server has no pgvector",
                     "install pgvector on the database server "
                     "(https://github.com/pgvector/pgvector#installation)")
    found += f", pgvector {vector[0]}" if vector else ", pgvector available"
    if not applied and not meta:
        return Check("store", OK, f"{found}; no memd tables yet (the first start makes "
                                  "them)")
    status, schema, fix = _schema(applied, meta, "postgres", where, _embedder_dim(settings))
    return Check("store", status, f"{found}; {schema}", fix)
