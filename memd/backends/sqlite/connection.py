"""The SQLite store's connection: one apsw connection per store, prepared in one place
(sqlite-vec loaded, WAL and pragmas set), guarded by a re-entrant lock so the daemon's
threads never interleave a transaction. An encrypted file's key is applied on every
connection to it, this one and the side ones (:mod:`.cipher`).

WAL checkpoints run in a thread of the store's own, never in a write: SQLite's automatic
checkpoint runs in the commit that takes the WAL past its limit, which stalls that one
write, so a WAL hook replaces it and wakes the thread once the WAL holds
``checkpoint_pages``; a write checkpoints in line only when the thread has fallen 10x
behind (see _catch_up).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, cast

import apsw

from memd.backends.common.connection import SqlConnection
from memd.backends.common.dialect import SQLITE
from memd.backends.common.errors import translate
from memd.backends.common.rows import load_json_text, row_mappers, strings_from_json
from memd.backends.sqlite.cipher import connect, connect_reader
from memd.backends.sqlite.fulltext import fts_text
from memd.backends.sqlite.schema import migrate
from memd.errors import MemdError, StorageError
from memd.private import private_dir, private_file, tighten_files

log = logging.getLogger("memd.sqlite")

Params = Sequence[Any] | dict[str, Any]
# The errors a statement can raise: apsw's, and Python's for an integer SQLite can't hold.
DRIVER_ERRORS = (apsw.Error, OverflowError)
driver_error: functools.partial[MemdError] = functools.partial(
    translate, database="SQLite", conflict=apsw.ConstraintError, invalid=OverflowError,
    unavailable=(apsw.BusyError, apsw.LockedError))

# JSON is stored as text, string arrays (tags, entities) as JSON text.
MAP = row_mappers(load_json_text, strings_from_json)


def to_json(value: Any) -> str:
    """A JSON column's value as SQLite stores it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class SQLiteConnection(SqlConnection):
    """The connection, its transactions and its checkpoints. What the store keeps in
    memory of the file's rows registers a way to forget it (``on_rollback``), and what
    holds a connection of its own a way to close it (``on_close``)."""

    dialect = SQLITE
    map = MAP
    json = staticmethod(to_json)
    checkpoint_pages = 1000  # WAL pages (4 KB) that wake the checkpoint thread
    concurrent_writes = False  # every write takes the store's lock, on its one connection

    def __init__(self, path: str | Path = ":memory:", dim: int = 384,
                 key: str | None = None) -> None:
        self.path = str(path)
        self.dim = dim
        self._key = key  # of an encrypted file; None for a plaintext one
        self.lock = threading.RLock()
        self._depth = threading.local()  # this thread's transaction() nesting
        self._closed = False
        self._checkpointer: apsw.Connection | None = None
        self._checkpoint_due = threading.Event()
        self._checkpoint_lock = threading.Lock()
        self._wal_pages = 0  # the WAL's length after the last commit
        self._checkpoint_thread: threading.Thread | None = None
        self.on_rollback: list[Callable[[], None]] = []
        self.on_close: list[Callable[[], None]] = []
        # The engine's worker threads read beside the store's connection, each on a
        # read-only one of its own (side_reads); an in-memory database has no other.
        self.concurrent_reads = self.path != ":memory:"
        self._side = threading.local()  # this thread's side_reads() depth and connection
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        try:
            if self.path != ":memory:":
                _private_store(Path(self.path))
            self._db = connect(self.path, key)
            self._prepare()
            migrate(self._db, self.lock, self.path, self.dim)
        except apsw.Error as exc:
            raise StorageError(f"cannot open SQLite store at {self.path}: {exc}") from exc

    def _prepare(self) -> None:
        db = self._db
        _load_vec(db)
        db.set_busy_timeout(10_000)
        db.create_scalar_function("memd_fts_text", cast(Any, fts_text), 2, deterministic=True)
        for pragma in (
            "journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON",
            "secure_delete = ON", "temp_store = MEMORY", "cache_size = -65536",
        ):
            db.execute(f"PRAGMA {pragma}")
        db.set_wal_hook(self._wal_grew)  # in place of the automatic checkpoint

    @property
    def driver(self) -> apsw.Connection:
        """The apsw connection itself, for a bulk loader that writes whole tables in the
        store's own transactions (``memd import``); everything else goes through the
        store's parts."""
        return self._db

    def _wal_grew(self, _db: apsw.Connection, _name: str, pages: int) -> int:
        """After each commit: wake the checkpoint thread once the WAL is long enough."""
        self._wal_pages = pages
        if pages >= self.checkpoint_pages and not self._closed:
            if self._checkpoint_thread is None:
                self._checkpoint_thread = threading.Thread(
                    target=self._checkpoints, name="memd-sqlite-checkpoint", daemon=True)
                self._checkpoint_thread.start()
            self._checkpoint_due.set()
        return apsw.SQLITE_OK

    def _checkpoints(self) -> None:
        while True:
            self._checkpoint_due.wait()
            self._checkpoint_due.clear()
            if self._closed:
                return
            try:
                self.checkpoint()
            except StorageError as exc:  # e.g. busy: the next commit wakes it again
                log.warning("%s", exc)

    def checkpoint(self) -> None:
        """Copy the WAL back into the database without blocking writers (PASSIVE), from
        a connection of its own so the store's lock is not held meanwhile. The store's
        checkpoint thread calls it; anyone may."""
        if self.path == ":memory:":
            return
        try:
            with self._checkpoint_lock:  # one apsw connection: one thread at a time
                if self._checkpointer is None:
                    self._checkpointer = connect(self.path, self._key)
                    self._checkpointer.set_busy_timeout(1000)
                self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except apsw.Error as exc:
            raise StorageError(f"checkpoint failed: {exc}") from exc

    def _catch_up(self) -> None:
        """After a commit, with the store's lock: a checkpoint in line when the thread
        has fallen 10x behind, as under writes back to back it can (a PASSIVE checkpoint
        lets the WAL restart only once it has copied every frame before the next write
        begins); the WAL stays as short as SQLite's automatic checkpoint kept it."""
        if self._wal_pages >= 10 * self.checkpoint_pages:
            self._wal_pages = 0
            with self._checkpoint_lock:  # after the thread's, if one is running
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        self._closed = True
        for close in self.on_close:
            close()
        if self._checkpoint_thread is not None:
            self._checkpoint_due.set()
            self._checkpoint_thread.join(timeout=30)
        with self.lock, self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
            with self._readers_lock:
                for reader in self._readers:
                    reader.close()
                self._readers.clear()
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.lock:
            self._depth.n = getattr(self._depth, "n", 0) + 1
            try:
                with self._db:
                    yield
                if self._depth.n == 1:
                    self._catch_up()
            except apsw.Error as exc:
                self.drop_caches()
                raise StorageError(f"SQLite: {exc}") from exc
            except BaseException:
                self.drop_caches()  # rolled back: the caches may be ahead of the file
                raise
            finally:
                self._depth.n -= 1

    def in_transaction(self) -> bool:
        return bool(getattr(self._depth, "n", 0))

    def read_batch(self) -> AbstractContextManager[None]:
        """Nothing to share on SQLite: every read is an in-process call already."""
        return nullcontext()

    @contextmanager
    def side_reads(self) -> Iterator[None]:
        """This worker thread's reads outside a transaction run on a read-only connection
        of the thread's own, without the store's lock: beside the requests' reads and
        writes on the store's connection (under WAL it reads the last commit, as the
        store's connection does outside a transaction)."""
        self._side.depth = getattr(self._side, "depth", 0) + 1
        try:
            yield
        finally:
            self._side.depth -= 1

    def _reader(self) -> apsw.Connection | None:
        """This thread's side connection, opened at its first read; None where its reads
        go to the store's connection (not a side read, in a transaction, in memory)."""
        if not (getattr(self._side, "depth", 0) and self.concurrent_reads) \
                or self.in_transaction():
            return None
        reader: apsw.Connection | None = getattr(self._side, "reader", None)
        if reader is None:
            with self._readers_lock:
                if self._closed:
                    return None
                reader = connect_reader(self.path, self._key)
                _load_vec(reader)
                self._readers.append(reader)
            self._side.reader = reader
        return reader

    def drop_caches(self) -> None:
        """Forget what is kept in memory of the file's rows (the vector caches)."""
        for drop in self.on_rollback:
            drop()

    @property
    def closed(self) -> bool:
        return self._closed

    def data_version(self) -> int:
        """SQLite's count of the changes other connections made to the file."""
        with self.lock:
            return int(cast(int, self._db.execute("PRAGMA data_version").fetchall()[0][0]))

    def changes(self) -> tuple[int, int] | None:
        """What has changed the file so far: other connections' commits (data_version)
        and this connection's rows written; None where the caller's reads do not go to
        this connection at its last commit (a side read, or in a transaction). The
        caller holds the store's lock."""
        if self.in_transaction() or self._reader() is not None:
            return None
        return self.data_version(), int(self._db.total_changes())

    def scrub(self) -> None:
        """Leave no deleted row readable in the files: FTS5 keeps a deleted row's terms in
        its segments until they are merged (its secure-delete option covers only what it
        rewrites), so each index is merged whole ('optimize'); the WAL, which holds the
        pages as they were before, is checkpointed and truncated; VACUUM rewrites the
        file without its free pages (secure_delete zeroes what a delete frees), and its
        own WAL frames are checkpointed and truncated in turn."""
        if self.path == ":memory:":
            return
        with self.lock, self._checkpoint_lock:
            db = self._db
            try:
                for fts in ("memories_fts", "messages_fts"):
                    with db:
                        db.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except apsw.Error as exc:
                raise StorageError(f"SQLite: cannot scrub the database: {exc}") from exc

    def check_row_security(self) -> None:
        """Nothing to check: one SQLite file belongs to one daemon, which filters every
        query by user itself."""

    def ensure_history_partitions(self, now: float, months: int = 3) -> int:
        return 0  # one table holds every month

    def rows_each(self, one: str, keys: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """The rows of the key look-up ``one`` for each of ``keys`` (its parameters), a
        compound SELECT of them per 100 (SQLite takes at most 500 parts to one): where
        the keys OR-ed or IN-listed in one WHERE may have SQLite (or vec0) walk the whole
        table instead of looking each up."""
        out: list[tuple[Any, ...]] = []
        for i in range(0, len(keys), 100):
            chunk = keys[i : i + 100]
            out += self.rows(" UNION ALL ".join([one] * len(chunk)),
                             [x for key in chunk for x in key])
        return out

    def rows(self, query: str, params: Params = ()) -> list[tuple[Any, ...]]:
        reader = self._reader()
        with self.lock if reader is None else nullcontext():
            try:
                return list((reader or self._db).execute(query, params))
            except DRIVER_ERRORS as exc:
                raise driver_error(exc) from exc

    def write(self, query: str, params: Params = ()) -> int:
        """Execute a write; returns the number of rows changed."""
        with self.lock:
            try:
                self._db.execute(query, params)
                changed = self._db.changes()
                if not self.in_transaction():
                    self._catch_up()
                return changed
            except DRIVER_ERRORS as exc:
                raise driver_error(exc) from exc

    def write_many(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement over many parameter rows, in one transaction."""
        with self.transaction():
            try:
                self._db.executemany(query, rows)
            except DRIVER_ERRORS as exc:
                raise driver_error(exc) from exc


def _load_vec(db: apsw.Connection) -> None:
    """sqlite-vec's functions and vec0 tables on ``db``."""
    import sqlite_vec

    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    db.enable_load_extension(False)


def _private_store(path: Path) -> None:
    """The store's file 0600 before SQLite opens it: SQLite gives the -wal and -shm files
    it creates the database file's mode. Its folder is made 0700 if missing; an existing
    one is not this module's to change (the data dir is tightened by ``Memd.open``)."""
    private_dir(path.parent, tighten=False)
    try:
        private_file(path)
        tighten_files(Path(f"{path}-wal"), Path(f"{path}-shm"))
    except OSError as exc:
        raise StorageError(f"cannot create the SQLite store at {path}: {exc}") from exc
